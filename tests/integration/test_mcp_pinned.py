"""``engramdb mcp --agent``: a server pinned to one agent (or a prefix) reaches no other, and
unknown arguments are refused (ADR-0050). Driven by the official ``mcp`` client over stdio and
streamable HTTP, against the test PostgreSQL, with a second agent's memory really present.

Why a second agent is written first through the Python API: "cannot reach B" is only shown
when B has facts a leak would return.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp import Client, StdioServerParameters

from engramdb import Memory
from engramdb.infra.providers.scripted import HashEmbedder
from tests.integration.test_mcp import ROOT, _data, _free_port, _server_env

SECRET = "My bank PIN is 4321."


def _open(env: dict[str, str]) -> Memory:
    return Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True)


def _seed_other_agent(env: dict[str, str], agent: str) -> str:
    with _open(env) as memory:
        written = memory.write(agent, SECRET, speaker="Bo")
        memory.wait_for_projections(written.position, agent_id=agent)
        return next(d.fact_id for d in written.decisions if d.fact_id)


def _error(result: Any) -> str:
    assert result.is_error, result.structured_content
    text: str = result.content[0].text
    assert "\n" not in text and "Traceback" not in text
    return text


async def _attempts_on_other_agent(client: Client, other: str, other_fact: str) -> None:
    """Every tool, with every way of naming the other agent a model might try."""
    for tool, args in [
        ("retrieve", {"query": "bank PIN", "agent_id": other}),
        ("list_facts", {"agent_id": other}),
        ("get_fact", {"agent_id": other, "fact_id": other_fact}),
        ("history", {"agent_id": other, "fact_id": other_fact}),
        ("delete_fact", {"agent_id": other, "fact_id": other_fact}),
        ("write", {"agent_id": other, "text": "I moved to Mars."}),
        ("add_facts", {"agent_id": other, "facts": [{"subject": "Bo", "text": "Bo's PIN is 0000."}]}),
    ]:
        text = _error(await client.call_tool(tool, args))
        assert "4321" not in text


async def test_stdio_server_pinned_to_one_agent(pg_url, fresh_schema, tmp_path) -> None:
    schema, env = fresh_schema("mcpp")
    other_fact = _seed_other_agent(env, "bo")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "engramdb.services.entrypoints.cli.main", "mcp", "--agent", "ana"],
        env=_server_env(pg_url, schema, tmp_path), cwd=str(ROOT),
    )
    async with Client(params, read_timeout_seconds=60) as client:
        assert "no tool takes an `agent_id`" in (client.instructions or "")
        tools = {t.name: t for t in (await client.list_tools()).tools}
        for tool in tools.values():
            assert "agent_id" not in tool.input_schema["properties"], tool.name
            assert tool.input_schema["additionalProperties"] is False
        assert tools["write"].input_schema["required"] == ["text"]

        written = _data(await client.call_tool("write", {"text": "I work at Globex.", "speaker": "Ana"}))
        assert written["agent_id"] == "ana"
        found = _data(await client.call_tool("retrieve", {"query": "Where does Ana work? Globex"}))
        assert "Globex" in found["context"] and "4321" not in found["context"]
        listed = _data(await client.call_tool("list_facts", {}))
        texts = [f["text"] for f in listed["items"]]
        assert texts and all("Globex" in t for t in texts), texts
        assert _error(await client.call_tool("get_fact", {"fact_id": other_fact})).endswith(
            f"agent 'ana' has no fact {other_fact!r}"
        )
        await _attempts_on_other_agent(client, "bo", other_fact)
        # B's fact id alone, with the server filling in A: A has no such fact
        for tool in ("history", "delete_fact"):
            assert "4321" not in _error(await client.call_tool(tool, {"fact_id": other_fact}))
        assert "pinned to one agent; leave out 'agent_id'" in _error(
            await client.call_tool("list_facts", {"agent_id": "bo"})
        )
        # unknown arguments: refused, named, with what the tool does take
        top_k = _error(await client.call_tool("retrieve", {"query": "x", "top_k": 1}))
        assert "unknown argument(s) 'top_k'" in top_k and "query" in top_k
        tags = _error(await client.call_tool("write", {"text": "x", "tags": {"a": 1}}))
        assert "'tags'" in tags and "metadata" in tags  # named, with what write does take
    with _open(env) as memory:
        still = memory.get_fact("bo", other_fact)
        assert still.status == "active" and "4321" in still.text
        assert [f.text for f in memory.list_facts("bo").items] == [still.text]  # nothing added to B


@pytest.fixture
def prefix_server(pg_url, fresh_schema, tmp_path) -> Iterator[tuple[str, str]]:
    """A keyless loopback streamable-HTTP server pinned to ``team-a:*``; yields (url, the
    fact id of team-b:bo's secret)."""
    schema, env = fresh_schema("mcpq")
    other_fact = _seed_other_agent(env, "team-b:bo")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "engramdb.services.entrypoints.cli.main", "mcp", "--transport", "http",
         "--port", str(port), "--agent", "team-a:*"],
        env=_server_env(pg_url, schema, tmp_path), cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
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
        yield url, other_fact
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def test_http_server_pinned_to_a_prefix(prefix_server: tuple[str, str]) -> None:
    from mcp.client.streamable_http import streamable_http_client

    url, other_fact = prefix_server
    async with Client(streamable_http_client(url), read_timeout_seconds=60) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["retrieve"].input_schema["required"] == ["agent_id", "query"]
        written = _data(await client.call_tool(
            "write", {"agent_id": "team-a:ana", "text": "I live in Recife.", "speaker": "Ana"}
        ))
        assert written["decisions"]
        found = _data(await client.call_tool("retrieve", {"agent_id": "team-a:ana", "query": "Recife"}))
        assert "Recife" in found["context"]
        await _attempts_on_other_agent(client, "team-b:bo", other_fact)
        text = _error(await client.call_tool("list_facts", {"agent_id": "team-b:bo"}))
        assert "serves only agents 'team-a:*'" in text
        bad = _error(await client.call_tool("list_facts", {"agent_id": "team-a:ana", "limit": 5, "sort": "x"}))
        assert "unknown argument(s) 'sort'" in bad


def test_pin_must_be_an_agent_or_a_prefix(tmp_path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from engramdb.services.entrypoints.cli.main import app

    monkeypatch.setenv("ENGRAMDB_DATA_DIR", str(tmp_path))
    for bad in ("a*b*", "*x", "no spaces"):
        result = CliRunner().invoke(app, ["mcp", "--agent", bad])
        assert result.exit_code == 2, (bad, result.output)
        assert result.output.startswith("error: ") and "Traceback" not in result.output
