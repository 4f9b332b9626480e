"""A fact keeps every message it rests on: the processed one, then the recorded messages of
the same agent that the extractor cited. Anything else an extractor cites is dropped.

Real PostgreSQL, the real write pipeline and projections; the only double is the extractor
(``CitingExtractor``: a fixed answer per message id, as an extractor that sees recent turns
would give). Checked incrementally (``ProjectionSet``) and after a bulk rebuild.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from engramdb.domain.aggregate import AgentMemory
from engramdb.domain.decisions import MessageContext, apply_extraction
from engramdb.domain.errors import DecisionRejected
from engramdb.domain.extraction import (
    ExtractedEntity,
    ExtractedFact,
    Extraction,
    ExtractionInput,
    ExtractorInfo,
)
from engramdb.domain.payloads import MAX_SOURCE_MESSAGES, FactPayload, fact_sources
from engramdb.domain.resolution import Resolution
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.projections.rebuild import rebuild
from engramdb.projections.runner import ProjectionSet
from engramdb.services.extraction import ExtractionOutcome
from engramdb.services.management.audit import fact_history
from engramdb.services.memory.event_log import EventLog
from engramdb.services.write.messages import ConversationMessage
from engramdb.services.write.pipeline import WritePipeline

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


class CitingExtractor:
    """Per message id: facts about Ana citing the given ids (no entry: no fact)."""

    info = ExtractorInfo(extractor="citing-test")

    def __init__(self, facts: Mapping[str, Sequence[tuple[str, list[str]]]]) -> None:
        self.facts = facts

    def extract(self, request: ExtractionInput) -> ExtractionOutcome:
        facts = [
            ExtractedFact(text=text, entity="Ana", source_message_ids=cited)
            for text, cited in self.facts.get(request.message_id, [])
        ]
        entities = [ExtractedEntity(name="Ana")] if facts else []
        return ExtractionOutcome(extraction=Extraction(facts=facts, entities=entities))


def message(agent: str, message_id: str, i: int) -> ConversationMessage:
    return ConversationMessage(
        agent_id=agent, message_id=message_id, speaker="Ana", text=f"turn {i} of {agent}",
        occurred_at=T0 + timedelta(minutes=i),
    )


def fact_sources_in(url: str, schema: str, agent: str) -> dict[str, list[str]]:
    with psycopg.connect(url) as conn:
        conn.execute(f'SET search_path TO "{schema}", public')
        rows = conn.execute(
            "SELECT fact_text, source_message_ids FROM mem_facts WHERE agent_id = %s", (agent,)
        ).fetchall()
    return {text: list(ids) for text, ids in rows}


EXPECTED = {
    # earlier turns of the same agent kept, in the extractor's order, deduped, itself first
    "Ana lives in Porto": ["a3", "a1", "a2"],
    # another agent's message id, an unknown id, junk and a later-recorded turn: all dropped
    "Ana likes tea": ["a3"],
    # NOOP: the repetition only appends the confirming message, as before
    "Ana has a cat": ["a1", "a4"],
}


@pytest.fixture
def store(fresh_schema: Any) -> Any:
    schema, env = fresh_schema("src")
    app = EventLog(env)
    yield schema, env, app
    app.close()


def test_cited_recorded_messages_of_the_agent_become_sources(pg_url: str, store: Any) -> None:
    schema, env, app = store
    extractor = CitingExtractor({
        "a1": [("Ana has a cat", [])],
        "a3": [
            ("Ana lives in Porto", ["a1", "a3", "a2", "a1"]),
            ("Ana likes tea", ["b1", "nope", "", "bad\x00id", "x" * 500, "a9"]),
        ],
        "a4": [("Ana has a cat", ["a2"])],
    })
    pipeline = WritePipeline(app, extractor)
    with ProjectionSet.start(EventLog, env, HashEmbedder()) as ps:
        pipeline.write(message("agent-b", "b1", 0))  # b1 exists, but for another agent
        for i, mid in enumerate(["a1", "a2"], start=1):
            pipeline.write(message("agent-a", mid, i))
        # a3 and a9 recorded together (an ingest batch), a9 after a3: a3 may not cite it
        records = pipeline.record_many([message("agent-a", "a3", 3), message("agent-a", "a9", 9)])
        pipeline.write(message("agent-a", "a3", 3), recorded=records[0])
        result = pipeline.write(message("agent-a", "a4", 4))
        ps.wait(result.position, timeout=30)
    incremental = fact_sources_in(pg_url, schema, "agent-a")
    assert incremental == EXPECTED

    rebuild(EventLog, env, HashEmbedder())
    assert fact_sources_in(pg_url, schema, "agent-a") == incremental

    # the audit reads the same events; ADD shows its sources, the history still resolves
    porto = next(e for e in app.agent_events("agent-a")
                 if isinstance(e, AgentMemory.FactAdded) and e.text == "Ana lives in Porto")
    history = fact_history(app, "agent-a", porto.fact_id)
    assert [e.decision for e in history] == ["ADD"]
    assert history[0].message_id == "a3" and history[0].message_text == "turn 3 of agent-a"
    assert history[0].detail["source_message_ids"] == ["a3", "a1", "a2"]


def _memory() -> AgentMemory:
    mem = AgentMemory(agent_id="a")
    mem.register_entity("person:ana", "Ana", "person", "m1", {})
    return mem


def test_reconciliation_keeps_only_citations_the_caller_verified() -> None:
    mem = _memory()
    cited = [f"m{i}" for i in range(40)]
    extraction = Extraction(
        facts=[ExtractedFact(text="Ana likes tea", entity="Ana", source_message_ids=cited)],
        entities=[ExtractedEntity(name="Ana")],
    )
    resolutions = {"ana": Resolution(name="Ana", entity_type="person", kind="exact", entity_key="person:ana")}
    ctx = MessageContext("a", "m5", "Ana", T0, {}, recorded_citations=frozenset(cited[:30]))
    apply_extraction(mem, extraction, resolutions, ctx)
    added = [e for e in mem.collect_events() if isinstance(e, AgentMemory.FactAdded)]
    assert added[0].source_message_ids == fact_sources("m5", cited[:30])
    assert added[0].source_message_ids[:3] == ["m5", "m0", "m1"]
    assert len(added[0].source_message_ids) == MAX_SOURCE_MESSAGES

    # without verified citations (the default) only the message itself is a source
    mem = _memory()
    apply_extraction(mem, extraction, resolutions, MessageContext("a", "m5", "Ana", T0, {}))
    added = [e for e in mem.collect_events() if isinstance(e, AgentMemory.FactAdded)]
    assert added[0].source_message_ids == ["m5"]


@pytest.mark.parametrize("sources", [
    [], ["m2", "m1"], ["m1", "m1"], ["m1", ""], [f"m{i}" for i in range(1, 18)],
])
def test_the_aggregate_rejects_sources_that_break_the_invariant(sources: list[str]) -> None:
    mem = _memory()
    fact = FactPayload(
        fact_id="f1", entity_key="person:ana", linked_entities=[], attribute_key=None,
        text="Ana likes tea", category="general", confidence=0.9, importance=0.5,
        source_message_id="m1", source_message_ids=sources, speaker="Ana", valid_from=T0,
        decided_by={},
    )
    with pytest.raises(DecisionRejected):
        mem.add_fact(fact)
