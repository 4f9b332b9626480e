"""The image's command and health check, run as the container runs them (issue 27, ADR-0050).

Docker cannot run here, so the container is reproduced by its environment: the Dockerfile's
``ENV`` (``ENGRAMDB_HTTP_HOST=0.0.0.0``, port 8787 → a free one) and its ``CMD`` (``engramdb
serve --role ...``) against the test PostgreSQL and NATS, then the ``HEALTHCHECK`` command.
Without API keys the wildcard bind is refused with one ``error:`` line and exit 2; with keys
it serves, ``/readyz`` answers and the probe exits 0; with nothing listening the probe says
so in one line and exits 1.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.test_mcp import _free_port

ROOT = Path(__file__).resolve().parents[2]
PROBE = [sys.executable, "-m", "engramdb.services.entrypoints.serve.probe"]
KEY = "edb_container-test-key-" + "k" * 30


def _image_env() -> dict[str, str]:
    """The Dockerfile's ENV lines (``KEY=value`` pairs, continued lines included)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            env.update(dict(re.findall(r"(\w+)=(\S+)", line)))
    return env


def _image_cmd() -> list[str]:
    line = next(ln for ln in (ROOT / "Dockerfile").read_text().splitlines() if ln.startswith("CMD "))
    return list(json.loads(line[4:]))


def _container_env(pg_url: str, nats_url: str, schema: str, port: int, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAMDB_")}
    env.update(_image_env())
    env.update(ENGRAMDB_DATABASE_URL=pg_url, ENGRAMDB_NATS_URL=nats_url, ENGRAMDB_DB_SCHEMA=schema,
               ENGRAMDB_EMBEDDING_MODEL="hash-bow-384", ENGRAMDB_HTTP_PORT=str(port),
               ENGRAMDB_DATA_DIR=str(tmp_path), OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return env


def test_image_command_refuses_a_wildcard_bind_without_keys(pg_url, nats_url, fresh_schema, tmp_path) -> None:
    schema, _ = fresh_schema("ctr")
    env = _container_env(pg_url, nats_url, schema, _free_port(), tmp_path)
    assert env["ENGRAMDB_HTTP_HOST"] == "0.0.0.0"
    cmd = _image_cmd()
    assert cmd[:2] == ["engramdb", "serve"]
    run = subprocess.run([sys.executable, "-m", "engramdb.services.entrypoints.cli.main", *cmd[1:]],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run
    lines = run.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and "API keys" in lines[-1], run.stderr
    assert "Traceback" not in run.stderr


def test_image_health_check_follows_readyz(pg_url, nats_url, fresh_schema, tmp_path) -> None:
    schema, _ = fresh_schema("ctr")
    port = _free_port()
    env = _container_env(pg_url, nats_url, schema, port, tmp_path)
    env["ENGRAMDB_API_KEYS"] = json.dumps([{"key": KEY, "agents": ["*"], "scopes": ["admin"]}])
    down = subprocess.run(PROBE, env=env, capture_output=True, text=True, timeout=30)
    assert down.returncode == 1 and down.stdout.startswith("no answer from http://127.0.0.1:")
    proc = subprocess.Popen(
        [sys.executable, "-m", "engramdb.services.entrypoints.cli.main", "serve", "--role", "retrieve"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            check = subprocess.run(PROBE, env=env, capture_output=True, text=True, timeout=30)
            if check.returncode == 0:
                break
            assert time.monotonic() < deadline, check.stdout
            time.sleep(0.5)
        assert check.stdout.strip() == "ready (200)"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
