"""Every list filters by metadata, on every surface (issue 24: "retrieve and every list filter
by metadata inside SQL"): facts, messages and entities through Python, HTTP (``?metadata=``
JSON), NATS request/reply (``metadata`` object) and the CLI (``--metadata``). Same tree, same
rows; a bad tree is a 422 / validation reply / exit 2 naming it, never a 500."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from faststream.nats import NatsBroker
from typer.testing import CliRunner

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.cli.main import app as cli_app
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.entrypoints.nats.manage import register_manage, request_manage
from engramdb.services.memory.facade import Memory
from tests.support.cli_env import point_cli_at

SLACK = {"channel": "slack"}
TURNS = (("m1", "Ana", "I live in Recife.", {"channel": "slack"}),
         ("m2", "Ana", "I like sushi.", {"channel": "email"}),
         ("m3", "Rui", "I work at Vertix.", {"channel": "slack", "tier": "gold"}))


@pytest.fixture
def seeded(fresh_schema: Any, agent_id: str) -> Iterator[tuple[Memory, str]]:
    schema, env = fresh_schema("lmeta")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as memory:
        for mid, speaker, text, meta in TURNS:
            memory.write(agent_id, text, speaker=speaker, message_id=mid, metadata=meta)
        memory.wait_for_projections()
        yield memory, schema


def _expected(memory: Memory, agent_id: str) -> dict[str, Any]:
    """What the Python lists say for ``SLACK`` (the other surfaces must say the same)."""
    facts = memory.list_facts(agent_id, metadata=SLACK).items
    turns = memory.list_messages(agent_id, metadata=SLACK).items
    entities = memory.list_entities(agent_id, metadata=SLACK).items
    return {"facts": sorted(f.fact_id for f in facts), "messages": sorted(t.message_id for t in turns),
            "entities": sorted((e.entity_key, e.active_facts) for e in entities)}


def test_python_lists_filter_entities_by_their_facts_turns(seeded: tuple[Memory, str], agent_id: str) -> None:
    memory, _ = seeded
    every = {e.entity_key: e.active_facts for e in memory.list_entities(agent_id).items}
    gold = memory.list_entities(agent_id, metadata={"tier": "gold"}).items
    # the gold turn's one fact ("Rui works at Vertix") is about both of its entities
    assert {e.display_name: e.active_facts for e in gold} == {"Rui": 1, "Vertix": 1}
    slack = {e.entity_key: e.active_facts for e in memory.list_entities(agent_id, metadata=SLACK).items}
    ana = next(k for k in every if k.endswith("ana"))
    # Ana's sushi fact is from an email turn: counted unfiltered, not under the slack filter
    assert every[ana] == 2 and slack[ana] == 1
    assert memory.list_entities(agent_id, metadata={"channel": "fax"}).items == []
    first = memory.list_entities(agent_id, metadata=SLACK, limit=1)
    rest = memory.list_entities(agent_id, metadata=SLACK, cursor=first.next_cursor)
    assert [e.entity_key for e in first.items + rest.items] == sorted(slack)  # keyset pages, filtered in SQL
    assert _expected(memory, agent_id)["messages"] == ["m1", "m3"]


async def test_http_lists_take_a_json_metadata_filter(seeded: tuple[Memory, str], agent_id: str) -> None:
    memory, _ = seeded
    want = _expected(memory, agent_id)
    api = create_app(memory)
    base = f"/v1/agents/{agent_id}"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://t") as c:
        got: dict[str, Any] = {}
        for kind, key in (("facts", "fact_id"), ("messages", "message_id"), ("entities", "entity_key")):
            r = await c.get(f"{base}/{kind}", params={"metadata": json.dumps(SLACK)})
            assert r.status_code == 200, r.text
            got[kind] = sorted((i[key], i["active_facts"]) if kind == "entities" else i[key]
                               for i in r.json()["items"])
        assert got == want
        for bad in ("{not json", "[1, 2]", json.dumps({"channel": {"like": "s%"}}), "x" * 20_000,
                    json.dumps({"channel": "sl\u0000ck"}),  # jsonb cannot hold it: a 422, not a 500
                    "[" * 5000 + "]" * 5000):  # deep enough to exhaust the JSON decoder's recursion
            r = await c.get(f"{base}/facts", params={"metadata": bad})
            assert r.status_code == 422, (bad[:40], r.text)
            assert r.json()["detail"][0]["loc"] == ["query", "metadata"], r.text
        spec = api.openapi()["paths"]["/v1/agents/{agent_id}/entities"]["get"]["parameters"]
        assert "metadata" in {p["name"] for p in spec}


async def test_nats_lists_take_a_metadata_object(seeded: tuple[Memory, str], agent_id: str,
                                                 nats_url: str) -> None:
    memory, _ = seeded
    want = _expected(memory, agent_id)
    prefix = f"engramdb.manage.lm{uuid.uuid4().hex[:8]}"
    broker = NatsBroker(nats_url)
    register_manage(broker, memory, prefix=prefix)
    await broker.start()
    try:
        got: dict[str, Any] = {}
        for op, kind, key in (("list_facts", "facts", "fact_id"), ("list_messages", "messages", "message_id"),
                              ("list_entities", "entities", "entity_key")):
            reply = await request_manage(broker, op, {"agent_id": agent_id, "metadata": SLACK}, prefix=prefix)
            assert "result" in reply, reply
            got[kind] = sorted((i[key], i["active_facts"]) if kind == "entities" else i[key]
                               for i in reply["result"]["items"])
        assert got == want
        bad = await request_manage(broker, "list_facts", {"agent_id": agent_id,
                                                          "metadata": {"channel": {"like": "s"}}}, prefix=prefix)
        assert bad.get("error_type") == "validation" and "like" in bad["error"], bad
        bad = await request_manage(broker, "list_entities", {"agent_id": agent_id, "metadata": "slack"},
                                   prefix=prefix)
        assert bad.get("error_type") == "validation" and "metadata" in bad["error"], bad
    finally:
        await broker.stop()


def test_cli_lists_take_metadata(seeded: tuple[Memory, str], agent_id: str, pg_url: str,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    memory, schema = seeded
    want = _expected(memory, agent_id)
    point_cli_at(monkeypatch, pg_url, schema)
    runner = CliRunner()
    got: dict[str, Any] = {}
    for command, kind, key in (("list-facts", "facts", "fact_id"), ("list-messages", "messages", "message_id"),
                               ("list-entities", "entities", "entity_key")):
        out = runner.invoke(cli_app, [command, "--agent", agent_id, "--metadata", json.dumps(SLACK), "--json"])
        assert out.exit_code == 0, out.output
        items = json.loads(out.stdout)["items"]
        got[kind] = sorted((i[key], i["active_facts"]) if kind == "entities" else i[key] for i in items)
    assert got == want
    for bad in ("{not json", "[1]", json.dumps({"channel": {"like": "s"}}), "[" * 5000 + "]" * 5000):
        out = runner.invoke(cli_app, ["list-facts", "--agent", agent_id, "--metadata", bad])
        assert out.exit_code == 2, (bad, out.output)
        assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1, out.stderr
        assert "Traceback" not in out.output
