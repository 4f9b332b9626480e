"""The real ``mem0ai`` client (from PyPI, the ``mem0`` test extra) against a real
``engramdb serve`` (issue 24, ADR-0047): ``MemoryClient(api_key=..., host=...)`` unchanged —
add, search, get_all, get, update, delete, history, delete_all — and the answers carry
engramdb's provenance (source turns, who decided). The client's API key is an engramdb key:
a key for ``user:ana`` cannot read Bob's memory.

A subprocess on the test servers (embedded PostgreSQL + NATS), stopped with SIGINT (then
killed by its pid) whatever happens. The client's telemetry is off (``MEM0_TELEMETRY``): the
test talks to loopback only.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

os.environ["MEM0_TELEMETRY"] = "False"  # before mem0 is imported: no network but loopback

mem0_client = pytest.importorskip("mem0.client.main", reason="pip install -e '.[mem0]'")
mem0_exceptions = pytest.importorskip("mem0.exceptions")

ANA_KEY = "edb_test_ana_" + uuid.uuid4().hex
BOB_KEY = "edb_test_bob_" + uuid.uuid4().hex


def _plain(text: str) -> str:
    """The offline extractor may keep the sentence's full stop: compare the claim."""
    return text.rstrip(".")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(pg_url: str, nats_url: str, fresh_schema: Any, tmp_path: Path) -> Iterator[dict[str, str]]:
    schema, _env = fresh_schema("mem0")
    port = _free_port()
    ana, bob = f"ana{uuid.uuid4().hex[:8]}", f"bob{uuid.uuid4().hex[:8]}"
    keys = [{"id": "ana", "key": ANA_KEY, "agents": [f"user:{ana}"], "scopes": ["read", "write"]},
            {"id": "bob", "key": BOB_KEY, "agents": [f"user:{bob}"], "scopes": ["read", "write"]}]
    env = {**os.environ, "ENGRAMDB_DATABASE_URL": pg_url, "ENGRAMDB_NATS_URL": nats_url,
           "ENGRAMDB_DB_SCHEMA": schema, "ENGRAMDB_EMBEDDING_MODEL": "hash-bow-384",
           "ENGRAMDB_SUBJECT_PREFIX": f"p{uuid.uuid4().hex[:8]}", "ENGRAMDB_HTTP_PORT": str(port),
           "ENGRAMDB_API_KEYS": json.dumps(keys), "OMP_NUM_THREADS": "1"}
    for key in ("ENGRAMDB_LLM_API_KEY", "ENGRAMDB_LLM_BASE_URL"):
        env.pop(key, None)
    os.environ["MEM0_DIR"] = str(tmp_path / "mem0")
    proc = subprocess.Popen([sys.executable, "-m", "engramdb.services.entrypoints.cli.main", "serve"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.3)
        yield {"base": base, "ana": ana, "bob": bob}
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_real_mem0_client_runs_every_memory_verb(server: dict[str, str]) -> None:
    client = mem0_client.MemoryClient(api_key=ANA_KEY, host=server["base"])
    ana = server["ana"]

    added = client.add([{"role": "user", "content": "I live in Recife.", "name": "Ana"},
                        {"role": "user", "content": "I love jazz.", "name": "Ana"}],
                       user_id=ana, run_id="chat-1", metadata={"channel": "slack"})
    assert [r["event"] for r in added["results"]] == ["ADD", "ADD"], added
    client.add([{"role": "user", "content": "My sister Carla works at Acme.", "name": "Ana"}],
               user_id=ana, run_id="chat-2", metadata={"channel": "email"})

    found = client.search("Where does Ana live?", filters={"user_id": ana}, top_k=3)
    top = found["results"][0]
    assert _plain(top["memory"]) == "Ana lives in Recife" and top["score"] > 0
    assert top["user_id"] == ana and top["run_id"] == "chat-1"
    assert top["metadata"] == {"channel": "slack"}  # inherited from the turn
    assert top["provenance"]["sources"][0]["text"] == "I live in Recife."
    assert top["provenance"]["sources"][0]["session_id"] == "chat-1"

    # search narrowed to a run / by metadata: filtered inside retrieve's SQL, so the best match
    # of the question (Recife, run chat-1, slack) never comes back from the other run
    in_chat2 = client.search("Where does Ana live?", filters={"AND": [{"user_id": ana}, {"run_id": "chat-2"}]},
                             top_k=3)
    assert [_plain(m["memory"]) for m in in_chat2["results"]] == ["Ana's sister Carla works at Acme"], in_chat2
    assert all(m["run_id"] == "chat-2" for m in in_chat2["results"])
    by_email = client.search("Where does Ana live?", top_k=3,
                             filters={"AND": [{"user_id": ana}, {"metadata": {"channel": "email"}}]})
    assert [m["metadata"] for m in by_email["results"]] == [{"channel": "email"}], by_email

    everything = client.get_all(filters={"user_id": ana})
    assert everything["count"] == 3 and len(everything["results"]) == 3
    slack = client.get_all(filters={"AND": [{"user_id": ana}, {"metadata": {"channel": "slack"}}]})
    assert sorted(_plain(m["memory"]) for m in slack["results"]) == ["Ana lives in Recife", "Ana loves jazz"]
    chat2 = client.get_all(filters={"AND": [{"user_id": ana}, {"run_id": "chat-2"}]})
    assert [_plain(m["memory"]) for m in chat2["results"]] == ["Ana's sister Carla works at Acme"]

    one = client.get(top["id"])
    assert _plain(one["memory"]) == "Ana lives in Recife" and one["provenance"]["status"] == "active"

    updated = client.update(top["id"], text="Ana lives in Olinda")
    assert updated["memory"] == "Ana lives in Olinda" and updated["previous_id"] == top["id"]
    assert updated["provenance"]["decided_by"]["actor"] == "key:ana"
    assert client.get(top["id"])["memory"] == "Ana lives in Olinda"  # the old id follows

    steps = client.history(top["id"])
    assert [s["event"] for s in steps] == ["ADD", "UPDATE"]
    assert _plain(steps[1]["old_memory"]) == "Ana lives in Recife" and steps[1]["new_memory"] == "Ana lives in Olinda"
    assert steps[0]["provenance"]["message_text"] == "I live in Recife."

    jazz = next(m for m in slack["results"] if _plain(m["memory"]) == "Ana loves jazz")
    assert client.delete(jazz["id"])["message"]
    with pytest.raises(mem0_exceptions.MemoryNotFoundError):
        client.get(jazz["id"])
    assert [s["event"] for s in client.history(jazz["id"])] == ["ADD", "DELETE"]

    assert client.delete_all(user_id=ana)["message"]
    assert client.get_all(filters={"user_id": ana})["results"] == []


def test_the_api_key_is_an_engramdb_key_with_its_scopes(server: dict[str, str]) -> None:
    ana_client = mem0_client.MemoryClient(api_key=ANA_KEY, host=server["base"])
    bob_client = mem0_client.MemoryClient(api_key=BOB_KEY, host=server["base"])
    added = ana_client.add("I live in Recife.", user_id=server["ana"])
    assert added["results"]
    with pytest.raises(mem0_exceptions.AuthenticationError):
        bob_client.get_all(filters={"user_id": server["ana"]})
    with pytest.raises(mem0_exceptions.AuthenticationError):
        bob_client.get(added["results"][0]["id"])
    assert bob_client.get_all(filters={"user_id": server["bob"]})["results"] == []
    with pytest.raises(ValueError, match="Invalid API key"):
        mem0_client.MemoryClient(api_key="not-a-key", host=server["base"])


def test_mem0_errors_and_unsupported_filters_are_4xx(server: dict[str, str]) -> None:
    client = mem0_client.MemoryClient(api_key=ANA_KEY, host=server["base"])
    with pytest.raises(mem0_exceptions.ValidationError):
        client.add("hello")  # no user_id, agent_id or run_id: Mem0 rejects it too
    with pytest.raises(mem0_exceptions.MemoryNotFoundError):
        client.get("no-such-memory")
    with pytest.raises(mem0_exceptions.MemoryError) as bad:
        client.get_all(filters={"AND": [{"user_id": server["ana"]}, {"created_at": {"gte": "2024-01-01"}}]})
    assert "422" in str(bad.value.debug_info) or "created_at" in str(bad.value)
    raw = httpx.post(f"{server['base']}/v3/memories/add/", headers={"Authorization": f"Token {ANA_KEY}"},
                     content=b"{not json")
    assert 400 <= raw.status_code < 500


def test_infer_false_records_the_turn_and_decides_nothing(server: dict[str, str]) -> None:
    client = mem0_client.MemoryClient(api_key=ANA_KEY, host=server["base"])
    added = client.add("I live in Recife.", user_id=server["ana"], infer=False)
    assert added["results"] == [] and added["recorded"][0]["event"] == "RECORDED"
    assert client.get_all(filters={"user_id": server["ana"]})["results"] == []
