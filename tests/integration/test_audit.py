"""Audit answers from the event log: fact history (with lineage), agent history, as-of.

Runs with and without the read model (history must work from the log alone).
Embedder for the projections: ``HashEmbedder`` (deterministic test double).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from engramdb.domain.aggregate import MessageRecord
from engramdb.domain.payloads import FactPayload
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.projections.runner import ProjectionSet
from engramdb.services.management.audit import (
    _lineage_from_read_model,
    agent_history,
    fact_history,
    facts_as_of,
)
from engramdb.services.memory.event_log import EventLog

T0 = datetime(2024, 1, 10, 8, 0, tzinfo=UTC)
BY = {"extractor": "llm", "model": "m", "prompt_version": "v1"}


def fact(fid: str, text: str, at: datetime, msg: str) -> FactPayload:
    return FactPayload(
        fact_id=fid, entity_key="person:ana", linked_entities=[],
        attribute_key="residence", text=text, category="general", confidence=0.95,
        importance=0.5, source_message_id=msg, source_message_ids=[msg], speaker="Ana",
        valid_from=at,
        decided_by=BY,
    )


def moving_story(app: EventLog, agent: str) -> tuple[datetime, int]:
    """Ana lives in Lisbon (m1), says it again (m2), then moves to Porto (m3)."""
    mem = app.agent_memory(agent)
    msgs = {
        "m1": "I live in Lisbon", "m2": "Lisbon is home", "m3": "I moved to Porto",
    }
    records = [
        MessageRecord(agent_id=agent, message_id=mid, session_id=None, speaker="Ana", text=text,
                      occurred_at=T0 + timedelta(days=i), metadata={})
        for i, (mid, text) in enumerate(msgs.items())
    ]
    mem.register_entity("person:ana", "Ana", "person", "m1", BY)
    mem.add_fact(fact("f1", "Ana lives in Lisbon", T0, "m1"))
    app.save(mem, records[0])
    mem.confirm_fact("f1", "m2", T0 + timedelta(days=1))
    app.save(mem, records[1])
    time.sleep(0.01)
    between = datetime.now(UTC)
    time.sleep(0.01)
    mem.update_fact("f1", fact("f2", "Ana lives in Porto", T0 + timedelta(days=2), "m3"))
    pos = app.save(mem, records[2])[-1].notification.id
    return between, pos


def check_history(entries: list[Any]) -> None:
    assert [(e.decision, e.fact_id, e.target_fact_id) for e in entries] == [
        ("ADD", "f1", None), ("NOOP", None, "f1"), ("UPDATE", "f2", "f1"),
    ]
    add, noop, update = entries
    assert add.message_id == "m1" and add.message_text == "I live in Lisbon"
    assert noop.message_text == "Lisbon is home" and noop.valid_at == T0 + timedelta(days=1)
    assert update.message_text == "I moved to Porto" and update.decided_by == BY
    assert update.valid_at == T0 + timedelta(days=2)
    assert add.recorded_at < noop.recorded_at < update.recorded_at


def test_history_from_the_log_alone(fresh_schema: Any, agent_id: str) -> None:
    _, env = fresh_schema("audit")
    app = EventLog(env)
    try:
        moving_story(app, agent_id)
        # no read model in this schema: versions come from scanning the agent's events
        check_history(fact_history(app, agent_id, "f2"))
        check_history(fact_history(app, agent_id, "f1"))
        only_f1 = fact_history(app, agent_id, "f1", lineage=False)
        assert [e.decision for e in only_f1] == ["ADD", "NOOP", "UPDATE"]
        assert fact_history(app, agent_id, "nope") == []
    finally:
        app.close()


def test_history_with_read_model_and_as_of(fresh_schema: Any, agent_id: str) -> None:
    _, env = fresh_schema("audit")
    app = EventLog(env)
    try:
        with ProjectionSet.start(EventLog, env, HashEmbedder()) as ps:
            between, pos = moving_story(app, agent_id)
            ps.wait(pos, timeout=20)
            # the versions come from mem_facts.event_versions (lineage via the read model)
            assert _lineage_from_read_model(app, agent_id, "f2") == [3, 4, 5]
            check_history(fact_history(app, agent_id, "f2"))
            only_f2 = fact_history(app, agent_id, "f2", lineage=False, with_messages=False)
            assert [e.decision for e in only_f2] == ["UPDATE"]

        everything = agent_history(app, agent_id)
        assert [e.decision for e in everything] == ["OPENED", "ENTITY", "ADD", "NOOP", "UPDATE"]
        assert [e.version for e in everything] == [1, 2, 3, 4, 5]

        # transaction time: before the UPDATE was recorded memory held Lisbon, after it Porto
        before = facts_as_of(app, agent_id, between)
        assert [(f.fact_id, f.status, f.reinforcement_count) for f in before] == [("f1", "active", 1)]
        now = facts_as_of(app, agent_id, datetime.now(UTC))
        assert [(f.fact_id, f.text) for f in now] == [("f2", "Ana lives in Porto")]
        # valid time: on day 1 of the conversation Ana lived in Lisbon (as known today)
        day1 = facts_as_of(app, agent_id, T0 + timedelta(days=1), axis="valid")
        assert [(f.fact_id, f.status, f.superseded_by) for f in day1] == [("f1", "superseded", "f2")]
        assert facts_as_of(app, agent_id, T0 - timedelta(days=1), axis="valid") == []
    finally:
        app.close()
