"""``engramdb mcp`` against the test PostgreSQL, driven by the ``mcp`` SDK's own client: the
stdio server as a subprocess, and the streamable-HTTP server (with API keys) as a subprocess.

Each tool is called and its answer checked: a written fact is retrievable and listed,
``get_fact`` shows its source turn, ``delete_fact`` makes it inactive, ``history`` shows
both decisions; a bad agent id is a tool error in one line; over HTTP a missing key is a 401
and a key outside its agents/scope gets a tool error.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters
from typer.testing import CliRunner

from engramdb.services.entrypoints.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
TOOLS = {"write", "retrieve", "list_facts", "get_fact", "delete_fact", "history"}
READ_KEY, WRITE_KEY = "edb_test-read-key-" + "r" * 30, "edb_test-write-key-" + "w" * 30


def _server_env(pg_url: str, schema: str, data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAMDB_")}
    env.update(
        ENGRAMDB_DATABASE_URL=pg_url,
        ENGRAMDB_DB_SCHEMA=schema,
        ENGRAMDB_EMBEDDING_MODEL="hash-bow-384",
        ENGRAMDB_DATA_DIR=str(data_dir),  # no stray api-keys.json from the machine
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(ROOT),
        **extra,
    )
    return env


def _data(result: Any) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


async def _exercise_tools(client: Client, agent: str) -> None:
    """The full round: write, retrieve, list, get, delete, list again, history."""
    listed = await client.list_tools()
    tools = {t.name: t for t in listed.tools}
    assert set(tools) >= TOOLS
    schema = tools["write"].input_schema
    assert schema["required"] == ["agent_id", "text"] and "pattern" in schema["properties"]["agent_id"]
    assert "ctx" not in schema["properties"]
    assert "forget" in (tools["delete_fact"].description or "")

    written = _data(await client.call_tool(
        "write", {"agent_id": agent, "text": "I work at Globex.", "speaker": "Rita"}
    ))
    fact_id = next(d["fact_id"] for d in written["decisions"] if d["kind"] == "ADD")

    found = _data(await client.call_tool(
        "retrieve", {"agent_id": agent, "query": "Where does Rita work? Globex"}
    ))
    assert fact_id in [f["fact_id"] for f in found["facts"]] and "Globex" in found["context"]
    assert set(found) == {"context", "facts", "detail"} and found["detail"] is None
    assert set(found["facts"][0]) == {"fact_id", "text"}  # no scores unless asked
    detailed = _data(await client.call_tool(
        "retrieve", {"agent_id": agent, "query": "Where does Rita work? Globex", "detail": True}
    ))
    assert detailed["detail"]["facts"][0]["scores"] and "plan" in detailed["detail"]
    assert "trace" not in detailed["detail"]
    assert len(json.dumps(found)) < len(json.dumps(detailed)) / 2

    page = _data(await client.call_tool("list_facts", {"agent_id": agent}))
    assert [f["fact_id"] for f in page["items"]] == [fact_id]
    # narrowed by the source turn's metadata, in SQL (the turn was written with none)
    none = _data(await client.call_tool("list_facts", {"agent_id": agent, "metadata": {"channel": "slack"}}))
    assert none["items"] == []
    kept = _data(await client.call_tool("list_facts", {"agent_id": agent,
                                                       "metadata": {"NOT": [{"channel": "slack"}]}}))
    assert [f["fact_id"] for f in kept["items"]] == [fact_id]
    bad_tree = await client.call_tool("list_facts", {"agent_id": agent, "metadata": {"channel": {"like": "s"}}})
    assert bad_tree.is_error and "\n" not in bad_tree.content[0].text

    detail = _data(await client.call_tool("get_fact", {"agent_id": agent, "fact_id": fact_id}))
    assert detail["status"] == "active"
    assert detail["sources"][0]["text"] == "I work at Globex."

    deleted = _data(await client.call_tool("delete_fact", {"agent_id": agent, "fact_id": fact_id}))
    assert deleted["status"] == "retracted"
    assert _data(await client.call_tool("list_facts", {"agent_id": agent}))["items"] == []
    gone = _data(await client.call_tool("get_fact", {"agent_id": agent, "fact_id": fact_id}))
    assert gone["status"] == "retracted"

    timeline = _data(await client.call_tool("history", {"agent_id": agent, "fact_id": fact_id}))
    entries = timeline["result"]
    assert [e["decision"] for e in entries] == ["ADD", "DELETE"]
    assert entries[1]["decided_by"]["via"] == "mcp"

    bad = await client.call_tool("list_facts", {"agent_id": "no spaces allowed"})
    assert bad.is_error and "agent_id" in bad.content[0].text  # the SDK checks the schema

    # a turn written with tags: the facts drawn from it carry them, and both reads narrow by them
    tagged = _data(await client.call_tool("write", {"agent_id": agent, "text": "I play the cello.", "speaker": "Rita",
                                                    "metadata": {"channel": "slack"}}))
    cello = next(d["fact_id"] for d in tagged["decisions"] if d["kind"] == "ADD")
    slack = _data(await client.call_tool("list_facts", {"agent_id": agent, "metadata": {"channel": "slack"}}))
    assert [f["fact_id"] for f in slack["items"]] == [cello] and slack["items"][0]["metadata"] == {"channel": "slack"}
    for channel, seen in (("slack", True), ("email", False)):
        found = _data(await client.call_tool("retrieve", {"agent_id": agent, "query": "Does Rita play the cello?",
                                                          "metadata": {"channel": channel}}))
        assert (cello in [f["fact_id"] for f in found["facts"]]) is seen, (channel, found)
    unknown = await client.call_tool("get_fact", {"agent_id": agent, "fact_id": "nope"})
    assert unknown.is_error and unknown.content[0].text.endswith(f"agent {agent!r} has no fact 'nope'")
    stale = await client.call_tool("delete_fact", {"agent_id": agent, "fact_id": fact_id})
    assert stale.is_error and "\n" not in stale.content[0].text


async def test_mcp_stdio_server(pg_url, fresh_schema, agent_id, tmp_path) -> None:
    schema, _env = fresh_schema("mcp")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "engramdb.services.entrypoints.cli.main", "mcp"],
        env=_server_env(pg_url, schema, tmp_path),
        cwd=str(ROOT),
    )
    async with Client(params, read_timeout_seconds=60) as client:
        assert "retrieve" in (client.instructions or "")
        assert client.server_info is not None and client.server_info.name == "engramdb"
        await _exercise_tools(client, agent_id)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def http_server(pg_url, fresh_schema, tmp_path) -> Iterator[str]:
    schema, _env = fresh_schema("mcph")
    keys = [
        {"key": WRITE_KEY, "agents": ["team-a:*"], "scopes": ["read", "write"]},
        {"key": READ_KEY, "agents": ["team-a:*"], "scopes": ["read"]},
    ]
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "engramdb.services.entrypoints.cli.main", "mcp", "--transport", "http",
         "--port", str(port)],
        env=_server_env(pg_url, schema, tmp_path, ENGRAMDB_API_KEYS=json.dumps(keys)),
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the MCP HTTP server did not start"
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _client(url: str, key: str) -> Client:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    return Client(streamable_http_client(url, http_client=http), read_timeout_seconds=60)


async def test_mcp_streamable_http_with_api_keys(http_server: str) -> None:
    url = http_server
    missing = httpx.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert missing.status_code == 401 and "missing API key" in missing.json()["detail"]
    unknown = httpx.post(url, json={}, headers={"Authorization": "Bearer edb_nope"})
    assert unknown.status_code == 401

    async with _client(url, WRITE_KEY) as client:
        await _exercise_tools(client, "team-a:mcp-1")
        outside = await client.call_tool("list_facts", {"agent_id": "team-b:x"})
        assert outside.is_error and "may not read agent 'team-b:x'" in outside.content[0].text
        written = _data(await client.call_tool(
            "write", {"agent_id": "team-a:mcp-2", "text": "I live in Recife.", "speaker": "Ana"}
        ))
        fact_id = next(d["fact_id"] for d in written["decisions"] if d["kind"] == "ADD")

    async with _client(url, READ_KEY) as reader:
        assert _data(await reader.call_tool("get_fact", {"agent_id": "team-a:mcp-2", "fact_id": fact_id}))
        denied = await reader.call_tool("delete_fact", {"agent_id": "team-a:mcp-2", "fact_id": fact_id})
        assert denied.is_error and "may not write" in denied.content[0].text
        denied = await reader.call_tool("write", {"agent_id": "team-a:mcp-2", "text": "x"})
        assert denied.is_error


def test_mcp_refuses_a_public_bind_without_keys(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("ENGRAMDB_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("ENGRAMDB_API_KEYS", raising=False)
    result = CliRunner().invoke(app, ["mcp", "--transport", "http", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "without API keys" in result.output and "Traceback" not in result.output
    bad = CliRunner().invoke(app, ["mcp", "--transport", "carrier-pigeon"])
    assert bad.exit_code == 2 and "unknown transport" in bad.output


def test_public_bind_checks_host_then_key() -> None:
    """A non-loopback bind (keys required) answers a foreign Host with 400 and a request
    without a key with 401, before the SDK or memory is involved."""
    from starlette.testclient import TestClient

    from engramdb.infra.api_keys import KeyRing
    from engramdb.services.entrypoints.mcp.server import build_server
    from engramdb.services.entrypoints.mcp.transport import http_app

    ring = KeyRing.parse([{"key": WRITE_KEY, "agents": ["*"], "scopes": ["read"]}], "test")
    asgi = http_app(build_server(memory=object(), keyring=ring), "10.1.2.3", ring, "mem.example")
    client = TestClient(asgi, base_url="http://10.1.2.3")
    assert client.post("/mcp", json={}).status_code == 401
    assert client.post("/mcp", json={}, headers={"Host": "evil.example"}).status_code == 400
    assert client.post("/mcp", json={}, headers={"Host": "mem.example"}).status_code == 401
