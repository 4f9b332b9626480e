"""Reprocess (issue 11 item 4, ADR-0023): re-extracting processed messages ends the facts they
alone produced (``FactRetracted``, reason ``reprocessed``) and records the new decisions as new
events with new fact ids; with the deterministic offline extractor the active fact set is the
same, history keeps the old facts, the turns stay retrievable, and rebuild == incremental.

Real PostgreSQL and projectors; the hashing embedder and the offline extractor (no LLM).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from test_manage import _say, memory, schema_env  # noqa: F401 - fixtures
from test_rebuild import dump
from typer.testing import CliRunner

from engramdb.services.entrypoints.cli.main import app as cli_app
from engramdb.services.management.models import NotFoundError
from engramdb.services.memory.facade import Memory


def _active(mem: Memory, agent: str) -> dict[str, str]:
    return {f.fact_id: f.text for f in mem.list_facts(agent, limit=500).items}


def test_reprocess_agent_is_idempotent_and_keeps_history(
    memory: Memory, agent_id: str, schema_env, pg_url: str  # noqa: F811
) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    _say(memory, agent_id, "I live in Recife and I work at Vertix.", "m1", occurred_at=t0)
    _say(memory, agent_id, "I love hiking.", "m2", occurred_at=t0 + timedelta(days=1))
    before = _active(memory, agent_id)
    assert len(before) >= 2

    result = memory.reprocess(agent_id)
    memory.wait_for_projections(result.position)
    assert [m.message_id for m in result.messages] == ["m1", "m2"]
    assert sorted(f for m in result.messages for f in m.ended_fact_ids) == sorted(before)
    after = _active(memory, agent_id)
    assert sorted(after.values()) == sorted(before.values())  # equivalent active set
    assert not set(after) & set(before)  # new facts, new ids
    # history: the old facts ended as "reprocessed", the new ones were decided via reprocess
    old = memory.get_fact(agent_id, next(iter(before)))
    assert old.status == "retracted"
    added = [e for e in memory.app.agent_events(agent_id)
             if getattr(e, "fact_id", None) in after and hasattr(e, "decided_by")]
    assert added and all(e.decided_by.get("via") == "reprocess" for e in added)
    assert {f.status for f in memory.list_facts(agent_id, status="all", limit=500).items} == {
        "active", "retracted"}
    # the turns are re-extracted, not withdrawn: still visible to retrieval
    assert not any(m.hidden for m in memory.list_messages(agent_id).items)

    # one message again: generation 2, only its own facts change
    again = memory.reprocess(agent_id, "m2")
    memory.wait_for_projections(again.position)
    [one] = again.messages
    assert one.generation == 2 and set(one.ended_fact_ids) <= set(after)
    assert sorted(_active(memory, agent_id).values()) == sorted(before.values())

    incremental = dump(pg_url, schema_env.schema)
    memory.rebuild()
    rebuilt = dump(pg_url, schema_env.schema)
    for table in ("mem_facts", "mem_hidden_messages", "mem_messages", "mem_entities"):
        assert rebuilt[table] == incremental[table], table

    with pytest.raises(NotFoundError):
        memory.reprocess(agent_id, "no-such-message")


def test_cli_reprocess_without_agent_or_failed_is_a_user_error() -> None:
    out = CliRunner().invoke(cli_app, ["reprocess"])
    assert out.exit_code == 2 and "--agent" in out.output


async def test_http_reprocess_route(memory: Memory, agent_id: str) -> None:  # noqa: F811
    import httpx

    from engramdb.services.entrypoints.http.api import create_app

    _say(memory, agent_id, "I like sushi.", "m1")
    before = _active(memory, agent_id)
    api = create_app(memory)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://t") as c:
        r = await c.post(f"/v1/agents/{agent_id}/reprocess", params={"message_id": "m1"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert [m["message_id"] for m in body["messages"]] == ["m1"]
        assert body["messages"][0]["ended_fact_ids"] == sorted(before)
        r = await c.post(f"/v1/agents/{agent_id}/reprocess", params={"message_id": "nope"})
        assert r.status_code == 404, r.text
        r = await c.post(f"/v1/agents/{agent_id}/reprocess", params={"mesage_id": "m1"})
        assert r.status_code == 422, r.text
    memory.wait_for_projections(body["position"])
    assert sorted(_active(memory, agent_id).values()) == sorted(before.values())
