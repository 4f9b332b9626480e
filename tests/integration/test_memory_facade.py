"""The in-process API end to end: write → projections → retrieve, audit, rebuild, as-of.

Real PostgreSQL and the real projectors; the only double is the hashing embedder (honest,
deterministic) and the offline rule-based extractor, which is what a user without an LLM key
gets.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.memory.facade import Memory
from tests.support.async_bridge import SyncBridge

EXACT = {"min_score": 0.0, "min_similarity": 0.0, "min_confidence": 0.0, "topk_facts": 50}


@pytest.fixture(params=["sync", "async"])
def memory(fresh_schema, request):
    """Every test runs on ``Memory`` and on ``AsyncMemory`` (through ``SyncBridge``, issue 24)."""
    _schema, env = fresh_schema("facade")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        if request.param == "sync":
            yield mem
            return
        bridge = SyncBridge(mem)
        try:
            yield bridge
        finally:
            bridge.close()


def test_write_then_read_your_writes(memory: Memory, agent_id: str) -> None:
    written = memory.write(agent_id, "I live in Recife and I work at Vertix.", speaker="Ana")
    assert written.position and not written.duplicate
    result = memory.retrieve(agent_id, "Where does Ana live? Recife", wait_for=written.position)
    # The offline extractor splits the compound sentence (one fact per attribute, issue 9).
    assert result.facts[0].fact_text == "Ana lives in Recife"
    assert result.facts[0].source_message_ids == [written.message_id]
    assert "Known facts:\n- Ana lives in Recife" in result.context


def test_redelivered_message_changes_nothing(memory: Memory, agent_id: str) -> None:
    first = memory.write(agent_id, "I love hiking.", speaker="Ana", message_id="m-1")
    again = memory.write(agent_id, "I love hiking.", speaker="Ana", message_id="m-1")
    assert again.duplicate and again.decisions == []
    memory.wait_for_projections(first.position)
    events = memory.history(agent_id)
    assert sum(1 for e in events if e.event == "FactAdded") == 1


def test_update_history_and_as_of_agree_with_the_log(memory: Memory, agent_id: str) -> None:
    t0 = datetime.now(UTC) - timedelta(days=10)
    old = memory.write(agent_id, "I live in Recife.", speaker="Ana", occurred_at=t0)
    time.sleep(0.05)
    between = datetime.now(UTC)
    time.sleep(0.05)
    new = memory.write(agent_id, "I moved to Porto Alegre.", speaker="Ana")
    memory.wait_for_projections(new.position)

    update = next(d for d in new.decisions if d.kind == "UPDATE")
    old_fact = next(d for d in old.decisions if d.kind == "ADD")
    assert update.target_fact_id == old_fact.fact_id

    timeline = memory.history(agent_id, update.fact_id)
    assert [e.decision for e in timeline] == ["ADD", "UPDATE"]
    assert timeline[0].message_id == old.message_id and timeline[1].message_id == new.message_id

    then = memory.facts_as_of(agent_id, between)
    now = memory.facts_as_of(agent_id, datetime.now(UTC))
    assert [f.fact_id for f in then] == [old_fact.fact_id]
    assert [f.fact_id for f in now] == [update.fact_id]

    # retrieve "as of" answers from the read models; it must agree with the log's replay
    for moment, replay in ((between, then), (datetime.now(UTC), now)):
        result = memory.retrieve(agent_id, "Where does Ana live?", as_of=moment, config_overrides=EXACT)
        assert {f.fact_id for f in result.facts} == {f.fact_id for f in replay}


def test_same_query_same_result_also_after_rebuild(memory: Memory, agent_id: str) -> None:
    texts = [
        "I live in Lisbon.",
        "My sister Carla works at Acme.",
        "I love jazz and I play the piano.",
        "Carla lives in Porto.",
    ]
    last = None
    for i, text in enumerate(texts):
        last = memory.write(agent_id, text, speaker="Rui", message_id=f"m{i}")
    assert last is not None
    memory.wait_for_projections(last.position)

    def snapshot() -> list[tuple[str, float]]:
        result = memory.retrieve(agent_id, "Where does Carla work?", config_overrides=EXACT)
        return [(f.fact_id, round(f.score, 9)) for f in result.facts] + [
            (e.message_id, round(e.score, 9)) for e in result.events
        ]

    before = snapshot()
    assert before == snapshot()
    report = memory.rebuild()
    assert report.embed_calls == 0
    assert snapshot() == before


def test_unknown_agent_gives_an_empty_result(memory: Memory) -> None:
    result = memory.retrieve("nobody-ever", "Where do I live?")
    assert result.facts == [] and result.context == ""
