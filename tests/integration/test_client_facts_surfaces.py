"""``infer=False`` and ``add_facts`` on every surface against the real servers (ADR-0049):
HTTP (the FastAPI app over httpx's ASGI transport on a real ``Memory``), NATS (the JetStream
ingest carries ``infer``; request/reply carries ``add_facts``, both on the real NATS server),
MCP (the ``mcp`` SDK's in-process client on the real server object) and the CLI (Typer's
runner, its own ``Memory`` on the same database). Same shapes, same refusals.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from faststream.nats import NatsBroker
from mcp import Client
from test_ingest import Collector, start_ingest, wait_until
from typer.testing import CliRunner

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.cli.main import app as cli_app
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.entrypoints.mcp.server import build_server
from engramdb.services.entrypoints.nats.manage import register_manage, request_manage
from engramdb.services.entrypoints.nats.publisher import publish_message_async
from engramdb.services.memory.facade import Memory
from engramdb.services.write.messages import ConversationMessage
from tests.support.cli_env import point_cli_at


@pytest.fixture
def memory(fresh_schema: Any) -> Iterator[Memory]:
    _schema, env = fresh_schema("cfsurf")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield mem


def _client_decided(memory: Memory, agent: str, fact_id: str, via: str) -> None:
    [added] = [h for h in memory.history(agent, fact_id) if h.decision == "ADD"]
    assert added.decided_by["extractor"] == "client" and added.decided_by["via"] == via


async def test_http(memory: Memory, agent_id: str) -> None:
    api = create_app(memory)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://t") as c:
        r = await c.post("/v1/messages", json={"agent_id": agent_id, "message_id": "m1",
                                               "speaker": "Ana", "text": "I live in Recife.",
                                               "infer": False})
        assert r.status_code == 200 and r.json()["decisions"] == [], r.text
        r = await c.post("/v1/facts", json={"agent_id": agent_id, "facts": [
            {"subject": "Ana", "text": "Ana lives in Recife", "sources": ["m1"]}]})
        assert r.status_code == 200, r.text
        fact_id = next(d["fact_id"] for d in r.json()["decisions"] if d["kind"] == "ADD")
        _client_decided(memory, agent_id, fact_id, "http")

        r = await c.post("/v1/facts", json={"agent_id": agent_id, "facts": [
            {"subject": "Ana", "text": "ok"}, {"subject": "Ana", "text": "x", "sources": ["m9"]}]})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "facts", 1, "sources"]
        assert "no recorded message 'm9'" in r.json()["detail"][0]["msg"]
        r = await c.post("/v1/facts", json={"agent_id": agent_id, "facts": [{"subject": "Ana", "text": " "}]})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][:3] == ["body", "facts", 0]
        r = await c.post("/v1/facts", json={"agent_id": agent_id, "facts": [
            {"subject": "Ana", "text": "x", "valid_from": "2020-01-01T00:00:00Z",
             "valid_to": "2019-01-01T00:00:00Z"}]})
        assert r.status_code == 422 and "not before valid_to" in r.text
        r = await c.post("/v1/facts", json={"agent_id": agent_id, "facts": []})
        assert r.status_code == 422
    memory.wait_for_projections()
    texts = [f.text for f in memory.list_facts(agent_id).items]
    assert texts == ["Ana lives in Recife"]  # nothing of the refused batches


async def test_nats_request_reply_and_ingest(memory: Memory, agent_id: str, nats_url: str) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    collector = Collector()
    runner = start_ingest(nats_url, memory.ingest_pipeline(), prefix, collector)
    try:
        await publish_message_async(nats_url, ConversationMessage(
            agent_id=agent_id, message_id="m1", speaker="Ana", text="I live in Recife.", infer=False),
            prefix=prefix)
        await publish_message_async(nats_url, ConversationMessage(
            agent_id=agent_id, message_id="m2", speaker="Ana", text="I work at Vertix."), prefix=prefix)
        wait_until(lambda: len(collector.results) == 2, what="two ingested turns")
    finally:
        runner.stop()
    stored, inferred = sorted(collector.results, key=lambda r: r.message_id)
    assert stored.decisions == [] and any(d.kind == "ADD" for d in inferred.decisions)

    broker = NatsBroker(nats_url)
    register_manage(broker, memory, prefix=f"{prefix}.manage")
    await broker.start()
    try:
        ok = await request_manage(broker, "add_facts", {"agent_id": agent_id, "facts": [
            {"subject": "Ana", "text": "Ana lives in Recife", "sources": ["m1"]}]},
            prefix=f"{prefix}.manage")
        fact_id = next(d["fact_id"] for d in ok["result"]["decisions"] if d["kind"] == "ADD")
        _client_decided(memory, agent_id, fact_id, "nats")
        bad = await request_manage(broker, "add_facts", {"agent_id": agent_id, "facts": [
            {"subject": "Ana", "text": "x", "sources": ["nope"]}]}, prefix=f"{prefix}.manage")
        assert bad["error_type"] == "validation" and bad["error"].startswith("facts[0].sources")
        bad = await request_manage(broker, "add_facts", {"agent_id": agent_id, "facts": [
            {"subject": "Ana"}]}, prefix=f"{prefix}.manage")
        assert bad["error_type"] == "validation" and "text" in bad["error"]
    finally:
        await broker.stop()


async def test_mcp(memory: Memory, agent_id: str) -> None:
    async with Client(build_server(memory=memory)) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert "add_facts" in tools
        written = await client.call_tool("write", {"agent_id": agent_id, "text": "I live in Recife.",
                                                   "speaker": "Ana", "message_id": "m1", "infer": False})
        assert not written.is_error and written.structured_content["decisions"] == []
        added = await client.call_tool("add_facts", {"agent_id": agent_id, "facts": [
            {"subject": "Ana", "text": "Ana lives in Recife", "sources": ["m1"]}]})
        assert not added.is_error, added.content
        fact_id = next(d["fact_id"] for d in added.structured_content["decisions"] if d["kind"] == "ADD")
        _client_decided(memory, agent_id, fact_id, "mcp")
        found = await client.call_tool("retrieve", {"agent_id": agent_id, "query": "Where does Ana live?"})
        assert fact_id in [f["fact_id"] for f in found.structured_content["facts"]]
        bad = await client.call_tool("add_facts", {"agent_id": agent_id, "facts": [
            {"subject": "Ana", "text": "x", "sources": ["nope"]}]})
        assert bad.is_error and "facts[0].sources" in bad.content[0].text


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, pg_url: str, fresh_schema: Any) -> str:
    schema, _env = fresh_schema("cfcli")
    point_cli_at(monkeypatch, pg_url, schema)
    return schema


def test_cli(cli_env: str, agent_id: str, tmp_path: Any) -> None:
    runner = CliRunner()

    def run(*args: str, stdin: str | None = None) -> Any:
        return runner.invoke(cli_app, list(args), input=stdin)

    out = run("write", "--agent", agent_id, "--speaker", "Ana", "--message-id", "m1", "--no-infer",
              "--json", "I live in Recife.")
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["decisions"] == []
    assert json.loads(run("list-facts", "--agent", agent_id, "--json").stdout)["items"] == []

    one = run("add-facts", "--agent", agent_id, "--subject", "Ana", "--text", "Ana lives in Recife",
              "--source", "m1")
    assert one.exit_code == 0 and "ADD" in one.stdout, one.output
    lines = tmp_path / "facts.jsonl"
    lines.write_text('{"subject": "Ana", "text": "Ana likes sushi"}\n\n'
                     '{"subject": "Ana", "text": "Ana lives in Recife"}\n')
    many = run("add-facts", "--agent", agent_id, "--file", str(lines), "--json")
    assert many.exit_code == 0, many.output
    assert [d["kind"] for d in json.loads(many.stdout)["decisions"]] == ["ADD", "NOOP"]
    piped = run("add-facts", "--agent", agent_id, "--file", "-",
                stdin='[{"subject": "Ana", "text": "Ana has a cat"}]')
    assert piped.exit_code == 0 and "ADD" in piped.stdout

    lines.write_text('{"subject": "Ana", "text": "fine"}\n{"subject": "Ana", "text": \n')
    broken = run("add-facts", "--agent", agent_id, "--file", str(lines))
    assert broken.exit_code == 2 and "line 2" in broken.stderr and "Traceback" not in broken.output
    unknown = run("add-facts", "--agent", agent_id, "--subject", "Ana", "--text", "x", "--source", "m7")
    assert unknown.exit_code == 2 and "facts[0].sources" in unknown.stderr
    facts = json.loads(run("list-facts", "--agent", agent_id, "--json").stdout)["items"]
    assert sorted(f["text"] for f in facts) == ["Ana has a cat", "Ana likes sushi", "Ana lives in Recife"]
