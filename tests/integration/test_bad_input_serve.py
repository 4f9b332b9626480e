"""``engramdb serve`` honours ``ENGRAMDB_SUBJECT_PREFIX`` end to end (issue 10: it ingested
from ``engramdb.messages.>`` and answered on ``engramdb.retrieve`` whatever the setting):
``engramdb publish`` → the ingest consumer → projections → ``<prefix>.retrieve``; and the
HTTP body cap comes from ``ENGRAMDB_HTTP_MAX_BODY_BYTES``. A real subprocess on the test
servers; stopped with SIGINT (then killed by its pid) whatever happens."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from typing import Any

import httpx
import nats
from test_ingest import run_async


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _ask(nats_url: str, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    nc = await nats.connect(nats_url)
    try:
        return dict(json.loads((await nc.request(subject, json.dumps(body).encode(), timeout=5)).data))
    finally:
        await nc.close()


def test_serve_honours_the_subject_prefix(pg_url: str, nats_url: str, fresh_schema: Any, agent_id: str) -> None:
    schema, _env = fresh_schema("serve")
    prefix = f"p{uuid.uuid4().hex[:8]}"
    port = _free_port()
    env = {**os.environ, "ENGRAMDB_DATABASE_URL": pg_url, "ENGRAMDB_NATS_URL": nats_url, "ENGRAMDB_DB_SCHEMA": schema,
           "ENGRAMDB_EMBEDDING_MODEL": "hash-bow-384", "ENGRAMDB_SUBJECT_PREFIX": prefix,
           "ENGRAMDB_HTTP_PORT": str(port), "ENGRAMDB_HTTP_MAX_BODY_BYTES": "4096", "OMP_NUM_THREADS": "1"}
    for key in ("ENGRAMDB_LLM_API_KEY", "ENGRAMDB_LLM_BASE_URL"):
        env.pop(key, None)
    cli = [sys.executable, "-m", "engramdb.services.entrypoints.cli.main"]
    proc = subprocess.Popen([*cli, "serve"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        published = subprocess.run([*cli, "publish", "--agent", agent_id, "--speaker", "Ana", "I live in Recife."],
                                   env=env, capture_output=True, text=True, timeout=60)
        assert published.returncode == 0 and f"{prefix.upper()}_MESSAGES" in published.stdout, published
        deadline = time.monotonic() + 60
        reply: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                reply = run_async(_ask(nats_url, f"{prefix}.retrieve", {"agent_id": agent_id, "query": "Recife"}))
            except Exception:  # noqa: BLE001 — not answering yet (starting)
                reply = {}
            if "Ana lives in Recife" in json.dumps(reply):
                break
            time.sleep(0.3)
        assert "Ana lives in Recife" in json.dumps(reply), reply
        listed = run_async(_ask(nats_url, f"{prefix}.manage.list_facts", {"agent_id": agent_id}))
        assert "Ana lives in Recife" in json.dumps(listed), listed
        big = httpx.post(f"http://127.0.0.1:{port}/v1/retrieve", json={"agent_id": agent_id, "query": "x" * 5000})
        assert big.status_code == 413, big.text
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
