"""Managing memory through the Python ``Memory`` (issue 11 items 1, 2, 5): list/get facts with
filters and cursors, entities, agents, messages; delete = a user retraction; forget an agent
= one event; retracted turns leave "Relevant conversations"; dry-run writes store nothing;
rebuild gives the same read models after all of it.

Real PostgreSQL and projectors; the hashing embedder and the offline extractor (no LLM).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg import sql
from test_rebuild import dump

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.management.models import NotActiveError, NotFoundError
from engramdb.services.memory.facade import Memory
from tests.support.async_bridge import SyncBridge

OPEN = {"min_score": 0.0, "min_similarity": 0.0, "min_confidence": 0.0}


@pytest.fixture
def schema_env(fresh_schema):
    return fresh_schema("manage")


@pytest.fixture(params=["sync", "async"])
def memory(schema_env, request):
    """Every test runs on ``Memory`` and on ``AsyncMemory`` (through ``SyncBridge``, issue 24)."""
    with Memory.open(env=schema_env.env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        if request.param == "sync":
            yield mem
            return
        bridge = SyncBridge(mem)
        try:
            yield bridge
        finally:
            bridge.close()


def _say(memory: Memory, agent: str, text: str, mid: str, **kw: object) -> list[str]:
    written = memory.write(agent, text, speaker="Ana", message_id=mid, **kw)  # type: ignore[arg-type]
    memory.wait_for_projections(written.position)
    return [d.fact_id for d in written.decisions if d.kind in ("ADD", "UPDATE") and d.fact_id]


def _texts(page) -> list[str]:  # noqa: ANN001 - a Page of facts
    return [f.text.rstrip(".") for f in page.items]


def _event_count(memory: Memory) -> int:
    """Rows in the event store itself (not a read model)."""
    recorder = memory.app.recorder
    table = sql.Identifier(recorder.datastore.schema, recorder.events_table_name)
    with psycopg.connect(memory.database.url) as conn:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
        assert row is not None
        return int(row[0])


def test_list_get_paginate_and_filter(memory: Memory, agent_id: str) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    _say(memory, agent_id, "I live in Recife and I work at Vertix.", "m1", session_id="s1",
         occurred_at=t0)
    _say(memory, agent_id, "I love hiking.", "m2", session_id="s2", occurred_at=t0 + timedelta(days=1))
    moved = _say(memory, agent_id, "I moved to Porto Alegre.", "m3", session_id="s2",
                 occurred_at=t0 + timedelta(days=2))
    active = memory.list_facts(agent_id)
    texts = _texts(active)
    assert "Ana lives in Recife" not in texts and len(texts) == 3 and active.next_cursor is None

    # pages of one: stable order, every fact once, then no cursor
    seen, cursor = [], None
    while True:
        page = memory.list_facts(agent_id, status="all", limit=1, cursor=cursor)
        seen += [f.fact_id for f in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 4
    assert seen == [f.fact_id for f in memory.list_facts(agent_id, status="all").items]

    assert [f.status for f in memory.list_facts(agent_id, status="superseded").items] == ["superseded"]
    assert _texts(memory.list_facts(agent_id, text="HIKING")) == ["Ana loves hiking"]
    assert set(_texts(memory.list_facts(agent_id, session="s1"))) == {"Ana works at Vertix"}
    assert len(memory.list_facts(agent_id, speaker="ana").items) == 3
    assert memory.list_facts(agent_id, speaker="Bob").items == []
    then = _texts(memory.list_facts(agent_id, valid_at=t0 + timedelta(hours=12)))
    assert "Ana lives in Recife" in then and "Ana loves hiking" not in then
    assert set(_texts(memory.list_facts(agent_id, entity="Ana"))) == set(texts)

    detail = memory.get_fact(agent_id, moved[0])
    assert detail.supersedes_fact_id is not None and detail.status == "active"
    assert [(s.message_id, s.text, s.session_id) for s in detail.sources] == [
        ("m3", "I moved to Porto Alegre.", "s2")
    ]
    assert detail.history.endswith(f"/facts/{moved[0]}/history")
    with pytest.raises(NotFoundError, match="no fact 'nope'"):
        memory.get_fact(agent_id, "nope")
    with pytest.raises(ValueError, match="agent_id"):
        memory.list_facts("bad agent!")
    with pytest.raises(ValueError, match="cursor"):
        memory.list_facts(agent_id, cursor="garbage")

    entities = memory.list_entities(agent_id)
    ana = next(e for e in entities.items if e.display_name == "Ana")
    assert ana.active_facts == 3 and ana.entity_type == "person"
    assert agent_id in [a.agent_id for a in memory.list_agents(limit=500).items]
    messages = memory.list_messages(agent_id, session="s2")
    assert [m.message_id for m in messages.items] == ["m2", "m3"]
    first = memory.list_messages(agent_id, limit=2)
    rest = memory.list_messages(agent_id, limit=2, cursor=first.next_cursor)
    assert [m.message_id for m in first.items + rest.items] == ["m1", "m2", "m3"]


def test_delete_is_a_user_retraction_and_hides_its_turn(memory: Memory, agent_id: str) -> None:
    [sushi] = _say(memory, agent_id, "I like sushi.", "m1")
    _say(memory, agent_id, "I work at Vertix.", "m2")
    before = memory.retrieve(agent_id, "what food do I like? sushi", config_overrides=OPEN)
    assert "I like sushi." in [c.text for c in before.events] or sushi in [
        f.fact_id for f in before.facts
    ]
    moment_before = datetime.now(UTC)
    deleted = memory.delete_fact(agent_id, sushi, actor="ana@example.com")
    memory.wait_for_projections(deleted.position)

    after = memory.retrieve(agent_id, "what food do I like? sushi", config_overrides=OPEN)
    assert sushi not in [f.fact_id for f in after.facts]
    assert "m1" not in [c.message_id for c in after.events]
    assert "sushi" not in after.context
    # as of before the delete, memory still shows what it knew
    past = memory.retrieve(agent_id, "what food do I like? sushi", as_of=moment_before,
                           config_overrides=OPEN)
    assert sushi in [f.fact_id for f in past.facts]

    [entry] = [e for e in memory.history(agent_id, sushi) if e.decision == "DELETE"]
    assert entry.reason == "user request"
    assert entry.decided_by == {"by": "user", "actor": "ana@example.com", "via": "python"}
    assert memory.get_fact(agent_id, sushi).status == "retracted"
    assert memory.get_fact(agent_id, sushi).sources[0].hidden
    with pytest.raises(NotActiveError, match="no longer active"):
        memory.delete_fact(agent_id, sushi)
    with pytest.raises(NotFoundError):
        memory.delete_fact(agent_id, "f_missing")
    with pytest.raises(NotFoundError, match="has no memory"):
        memory.delete_fact("never-seen-agent-xyz", "f_missing")


def test_forget_request_turn_no_longer_comes_back(memory: Memory, agent_id: str) -> None:
    """The issue's example: "I like sushi", then "Forget that I like sushi" in conversation."""
    _say(memory, agent_id, "I like sushi", "m1")
    _say(memory, agent_id, "Forget that I like sushi", "m2")
    result = memory.retrieve(agent_id, "what food do I like", config_overrides=OPEN)
    assert "m1" not in [c.message_id for c in result.events]
    assert memory.list_facts(agent_id).items == []


def test_superseded_fact_keeps_its_turn(memory: Memory, agent_id: str) -> None:
    """An UPDATE is not a retraction: the old turn is still conversation history (ADR-0016)."""
    _say(memory, agent_id, "I live in Recife.", "m1")
    _say(memory, agent_id, "I moved to Porto Alegre.", "m2")
    hidden = [m.message_id for m in memory.list_messages(agent_id).items if m.hidden]
    assert hidden == []


def test_forget_agent_is_one_event_and_rebuild_agrees(
    memory: Memory, agent_id: str, schema_env, pg_url: str
) -> None:
    _say(memory, agent_id, "I live in Recife and I work at Vertix.", "m1")
    [sushi] = _say(memory, agent_id, "I like sushi.", "m2")
    memory.wait_for_projections(memory.delete_fact(agent_id, sushi).position)
    other = agent_id + "-other"
    _say(memory, other, "I love hiking.", "o1")
    events = _event_count(memory)

    forgotten = memory.forget_agent(agent_id, actor="admin")
    memory.wait_for_projections(forgotten.position)
    assert forgotten.facts_ended == 2
    assert _event_count(memory) == events + 1
    assert memory.list_facts(agent_id).items == []
    assert {f.status for f in memory.list_facts(agent_id, status="all").items} == {
        "forgotten", "retracted"
    }
    assert all(m.hidden for m in memory.list_messages(agent_id).items)
    result = memory.retrieve(agent_id, "Where does Ana live? Recife Vertix", config_overrides=OPEN)
    assert result.facts == [] and result.events == []
    # the other agent is untouched; history and as-of still show what was known
    assert _texts(memory.list_facts(other)) == ["Ana loves hiking"]
    assert memory.history(agent_id)[-1].decision == "FORGET"
    before = [e for e in memory.history(agent_id) if e.decision == "FORGET"][0].recorded_at
    assert len(memory.facts_as_of(agent_id, before - timedelta(microseconds=1))) == 2
    agent = next(a for a in memory.list_agents(limit=500).items if a.agent_id == agent_id)
    assert agent.active_facts == 0 and agent.forgotten_at is not None

    # new turns after the forget are memory again
    _say(memory, agent_id, "I live in Lisbon.", "m3")
    assert _texts(memory.list_facts(agent_id)) == ["Ana lives in Lisbon"]
    assert [m.message_id for m in memory.list_messages(agent_id).items if not m.hidden] == ["m3"]

    incremental = dump(pg_url, schema_env.schema)
    memory.rebuild()
    rebuilt = dump(pg_url, schema_env.schema)
    for table in ("mem_facts", "mem_hidden_messages", "mem_forgotten", "mem_messages"):
        assert rebuilt[table] == incremental[table], table
    assert incremental["mem_hidden_messages"] and incremental["mem_forgotten"]


def test_dry_run_write_saves_nothing(memory: Memory, agent_id: str, schema_env, pg_url: str) -> None:
    _say(memory, agent_id, "I live in Recife.", "m1")
    events = _event_count(memory)
    dry = memory.write(agent_id, "I moved to Porto Alegre.", speaker="Ana", message_id="m2",
                       dry_run=True)
    assert dry.dry_run and dry.position == 0
    assert [d.kind for d in dry.decisions if d.kind == "UPDATE"] == ["UPDATE"]
    assert _event_count(memory) == events
    memory.wait_for_projections()
    assert [m.message_id for m in memory.list_messages(agent_id).items] == ["m1"]
    # the real write afterwards decides the same, from unchanged state
    real = memory.write(agent_id, "I moved to Porto Alegre.", speaker="Ana", message_id="m2")
    assert [(d.kind, d.text) for d in real.decisions] == [(d.kind, d.text) for d in dry.decisions]
    again = memory.write(agent_id, "I moved to Porto Alegre.", speaker="Ana", message_id="m2",
                         dry_run=True)
    assert again.duplicate and again.dry_run
