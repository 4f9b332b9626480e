"""Client facts (ADR-0049) on a REAL PostgreSQL: ``write(..., infer=False)`` stores the turn
and decides nothing; ``add_facts`` records the client's facts with provenance "client",
reconciled ADD / UPDATE / NOOP like extracted ones; bad facts are refused whole, naming the
fact, with nothing saved. The extractor is the offline rule-based one, wrapped to count its
calls (an ``infer=False`` turn must never reach it).
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.extraction import RuleBasedExtractor
from engramdb.services.management.audit import facts_as_of
from engramdb.services.memory.async_facade import AsyncMemory
from engramdb.services.memory.facade import Memory
from engramdb.services.write.client_facts import InvalidClientFacts
from tests.support.async_bridge import SyncBridge


class CountingExtractor(RuleBasedExtractor):
    """The real rule-based extractor, counting the messages it was asked about."""

    calls = 0

    def extract(self, request: Any) -> Any:
        type(self).calls += 1
        return super().extract(request)


@pytest.fixture(params=["sync", "async"])
def memory(fresh_schema: Any, request: Any) -> Iterator[Any]:
    """The sync facade, and ``AsyncMemory`` driven through the test bridge (issue 24's rule:
    the async API passes the sync one's behavioural tests)."""
    _schema, env = fresh_schema("cfacts")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, extractor=CountingExtractor(),
                     quiet=True) as mem:
        if request.param == "sync":
            yield mem
            return
        assert inspect.iscoroutinefunction(AsyncMemory.add_facts)  # bridged, not the sync one
        bridge = SyncBridge(mem)
        try:
            yield bridge
        finally:
            bridge.close()


def _head(memory: Memory) -> int:
    return memory.app.recorder.max_notification_id() or 0


def test_infer_false_stores_the_turn_only(memory: Memory, agent_id: str) -> None:
    before = CountingExtractor.calls
    stored = memory.write(agent_id, "I live in Recife.", speaker="Ana", message_id="m1", infer=False)
    assert CountingExtractor.calls == before and stored.decisions == [] and stored.llm_calls == 0
    assert not stored.extraction_pending and stored.extraction_error is None
    inferred = memory.write(agent_id, "I work at Vertix.", speaker="Ana", message_id="m2")
    assert CountingExtractor.calls == before + 1 and any(d.kind == "ADD" for d in inferred.decisions)
    memory.wait_for_projections()
    messages = {m.message_id: m for m in memory.list_messages(agent_id).items}
    assert messages["m1"].processed and messages["m1"].extractor == "none (infer=False)"
    assert [f.text for f in memory.list_facts(agent_id).items] == ["Ana works at Vertix."] or all(
        "Recife" not in f.text for f in memory.list_facts(agent_id).items)
    # the stored turn is still a turn: retrieval finds it among the conversations
    found = memory.retrieve(agent_id, "Recife")
    assert "Recife" in found.context
    # a dry run with infer=False decides nothing either
    dry = memory.write(agent_id, "I moved to Porto.", speaker="Ana", infer=False, dry_run=True)
    assert dry.dry_run and dry.decisions == [] and CountingExtractor.calls == before + 1


def test_add_facts_reconciles_like_extracted_facts(memory: Memory, agent_id: str) -> None:
    memory.write(agent_id, "We talked about my city.", speaker="Ana", message_id="m1", infer=False)
    added = memory.add_facts(agent_id, [
        {"subject": "Ana", "text": "Ana lives in Recife", "sources": ["m1"],
         "attribute_key": "residence", "metadata": {"origin": "crm"}},
        {"subject": "Ana", "text": "Ana likes sushi"},
    ])
    kinds = [d.kind for d in added.decisions]
    assert kinds.count("ADD") == 2 and kinds.count("ENTITY") == 1 and not added.rejected
    recife = next(d.fact_id for d in added.decisions if d.kind == "ADD" and "Recife" in (d.text or ""))
    assert recife is not None

    again = memory.add_facts(agent_id, [{"subject": "ana", "text": "Ana likes sushi"}])
    assert [d.kind for d in again.decisions] == ["NOOP"]
    moved = memory.add_facts(agent_id, [
        {"subject": "Ana", "text": "Ana lives in Porto", "attribute_key": "residence"}])
    update = next(d for d in moved.decisions if d.kind == "UPDATE")
    assert update.target_fact_id == recife

    history = memory.history(agent_id, recife)
    assert history[0].decision == "ADD" and history[0].decided_by["extractor"] == "client"
    assert history[0].decided_by["metadata"] == {"origin": "crm"}
    assert history[0].message_id == "m1"
    memory.wait_for_projections(moved.position, agent_id=agent_id)
    detail = memory.get_fact(agent_id, recife)
    assert detail.status == "superseded" and detail.sources[0].message_id == "m1"
    texts = sorted(f.text for f in memory.list_facts(agent_id).items)
    assert texts == ["Ana likes sushi", "Ana lives in Porto"]


def test_valid_to_bounds_the_fact_in_time(memory: Memory, agent_id: str) -> None:
    start, end = datetime(2010, 1, 1, tzinfo=UTC), datetime(2015, 6, 1, tzinfo=UTC)
    written = memory.add_facts(agent_id, [{"subject": "Ana", "text": "Ana lived in Lisbon",
                                           "valid_from": start, "valid_to": end}])
    assert [d.kind for d in written.decisions if d.kind != "ENTITY"] == ["ADD", "DELETE"]

    def valid_at(year: int) -> list[str]:  # valid time: what memory now knows held then
        return [f.text for f in facts_as_of(memory.app, agent_id, datetime(year, 1, 1, tzinfo=UTC),
                                            axis="valid")]

    assert valid_at(2012) == ["Ana lived in Lisbon"] and valid_at(2016) == valid_at(2009) == []
    assert memory.list_facts(agent_id).items == []  # it is not current
    assert memory.facts_as_of(agent_id, datetime.now(UTC)) == []


@pytest.mark.parametrize(("facts", "field", "why"), [
    ([{"subject": "Ana", "text": "   "}], "facts[0].text", "empty"),
    ([{"subject": "Ana", "text": "x"}, {"subject": "Ana", "text": "y", "sources": ["nope"]}],
     "facts[1].sources", "no recorded message"),
    ([{"subject": "Ana", "text": "x", "valid_to": datetime.now(UTC) + timedelta(days=3)}],
     "facts[0]", "future"),
    ([{"subject": "Ana", "text": "x", "valid_from": datetime(2020, 1, 1, tzinfo=UTC),
       "valid_to": datetime(2019, 1, 1, tzinfo=UTC)}], "facts[0]", "not before"),
    ([{"subject": "Ana", "text": "x", "valid_from": "2300-01-01T00:00:00Z"}],
     "facts[0].valid_from", "out of range"),
    ([{"subject": "Ana", "txt": "x"}], "facts[0].text", "Field required"),
    ([{"subject": "Ana", "text": "x", "txt": "x"}], "facts[0].txt", "Extra inputs"),
    ([], "facts", "at least 1"),
])
def test_bad_facts_are_refused_whole(memory: Memory, agent_id: str, facts: list[Any], field: str,
                                     why: str) -> None:
    memory.write(agent_id, "hello", message_id="m1", infer=False)
    head = _head(memory)
    with pytest.raises(InvalidClientFacts) as refused:
        memory.add_facts(agent_id, facts)
    assert refused.value.field == field and why in refused.value.reason
    assert _head(memory) == head  # nothing half-recorded


def test_a_stored_only_turn_is_one_commit_and_reprocess_leaves_it_unextracted(
    memory: Memory, agent_id: str
) -> None:
    """One path for infer=False (the facade, ``record_message`` and a NATS batch): ``Recorded``
    and ``Processed`` land together, so no crash can leave it pending for a retrier to extract;
    and a reprocess (a better model) does not extract what the caller said not to."""
    head = _head(memory)
    memory.write(agent_id, "I live in Recife.", speaker="Ana", message_id="m1", infer=False)
    memory.record_message(agent_id, "I work at Vertix.", speaker="Ana", message_id="m2")
    memory.write(agent_id, "I like sushi.", speaker="Ana", message_id="m3")
    memory.wait_for_projections()
    messages = {m.message_id: m for m in memory.list_messages(agent_id).items}
    assert messages["m1"].extractor == messages["m2"].extractor == "none (infer=False)"
    # m1, m2: each one commit of Recorded + Processed; never a pending record
    assert memory.pending_count(agent_id) == 0
    before = CountingExtractor.calls
    one = memory.reprocess(agent_id, "m1")
    assert one.messages[0].stored_only and one.messages[0].decisions == {}
    everything = memory.reprocess(agent_id)
    assert everything.stored_only == ["m1", "m2"]
    assert [o.message_id for o in everything.messages] == ["m3"]
    assert CountingExtractor.calls == before + 1  # m3 alone was extracted again
    assert _head(memory) > head


def test_a_batch_with_stored_only_turns_records_them_in_one_commit(
    fresh_schema: Any, agent_id: str
) -> None:
    """The NATS ingest records a fetched batch first (``record_many``); a stored-only turn in it
    is left to ``write``, which stores it whole — so after the batch's stage 1 alone (a crash
    there) the infer=False turn is not half-recorded."""
    from engramdb.services.write.messages import ConversationMessage

    _schema, env = fresh_schema("cfbatch")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, extractor=CountingExtractor(),
                     quiet=True) as mem:
        pipeline = mem.cell(agent_id).pipeline
        batch = [ConversationMessage(agent_id=agent_id, text="I like tea.", message_id="b1"),
                 ConversationMessage(agent_id=agent_id, text="Just a note.", message_id="b2",
                                     infer=False)]
        recorded = pipeline.record_many(batch)
        assert recorded[0] is not None and recorded[1] is None
        assert mem.app.message_record(agent_id, "b2") is None  # nothing half-done to resume
        results = [pipeline.write(r, recorded=rec) for r, rec in zip(batch, recorded, strict=True)]
        assert not any(r.duplicate for r in results)
        stored = mem.app.message_record(agent_id, "b2")
        assert stored is not None and stored.processed and stored.stored_only
