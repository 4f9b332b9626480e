"""The stored event format is a contract with every database already written.

Events are declared as classes (typed attributes) since issue 8; before, eventsourcing derived
them from the decorated methods. These tests pin what that change must not alter: the topic
and the field order of every event type (so new events are written byte for byte as before),
and that events stored before ADR-0007, whose topics name the module ``domain.aggregate``,
still load into the same classes and fold to the same state and fact rows.

Deliberate change since: ``FactAdded``/``FactUpdated`` are class version 2 (a fact's several
``source_message_ids``). Version-1 events, as every earlier release stored them, must still
load and fold to exactly the rows they folded to before: sources = [source_message_id].
And ``AgentJobs.ProfileRefreshed``/``ConsolidationReviewed`` are class version 2 (the model
that wrote them, ADR-0052); version-1 ones load with ``model = None``.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from eventsourcing.application import Application
from eventsourcing.domain import Snapshot
from eventsourcing.persistence import StoredEvent

from engramdb.domain.aggregate import LEGACY_MODULE_TOPIC, AgentMemory, MessageRecord
from engramdb.domain.fold import fold_facts
from engramdb.domain.jobs import AgentJobs
from engramdb.domain.payloads import FactPayload
from engramdb.services.memory.event_log import EventLog

T = datetime(2024, 1, 1, tzinfo=UTC)
BY = {"by": "x"}
MODULE = "engramdb.domain.aggregate"
# the library's own mapper: events as stored before per-agent encryption (ADR-0018); the
# tests below store with it and load through ``EventLog``'s encrypting mapper
_PLAIN = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}).mapper

# topic -> stored field order, as written by the code before the event classes were declared
FIELD_ORDER = {
    "AgentMemory.Opened": ["timestamp", "originator_topic", "agent_id"],
    "AgentMemory.EntityRegistered": [
        "timestamp", "entity_key", "display_name", "entity_type", "aliases", "message_id",
        "decided_by",
    ],
    "AgentMemory.EntityAliased": ["timestamp", "entity_key", "alias", "message_id"],
    "AgentMemory.RelationshipObserved": [
        "timestamp", "source_key", "target_key", "relation_type", "message_id", "observed_at",
    ],
    # version 2: ``source_message_ids`` after ``source_message_id``, ``class_version`` last
    "AgentMemory.FactAdded": [
        "timestamp", "fact_id", "entity_key", "linked_entities", "attribute_key", "text",
        "category", "confidence", "importance", "source_message_id", "source_message_ids",
        "speaker", "valid_from", "decided_by", "class_version",
    ],
    "AgentMemory.FactUpdated": [
        "timestamp", "supersedes_fact_id", "fact_id", "entity_key", "linked_entities",
        "attribute_key", "text", "category", "confidence", "importance", "source_message_id",
        "source_message_ids", "speaker", "valid_from", "decided_by", "class_version",
    ],
    "AgentMemory.FactConfirmed": ["timestamp", "fact_id", "message_id", "confirmed_at"],
    "AgentMemory.FactRetracted": [
        "timestamp", "fact_id", "message_id", "retracted_at", "reason", "decided_by",
    ],
    "AgentMemory.DecisionRejected": ["timestamp", "message_id", "decision", "reason"],
    "AgentMemory.EntitiesMerged": ["timestamp", "merged_key", "into_key", "message_id", "reason"],
    "MessageRecord.Recorded": [
        "timestamp", "originator_topic", "agent_id", "message_id", "session_id", "speaker",
        "text", "occurred_at", "metadata",
    ],
    "MessageRecord.Processed": [
        "timestamp", "extractor", "extraction", "raw_output", "error", "llm_calls", "decisions",
    ],
    # new in issue 10 (ADR-0014); pinned from its first release on
    "MessageRecord.ExtractionDeferred": [
        "timestamp", "agent_id", "message_id", "recorded_at", "reason", "attempts",
    ],
}
# the exact state bytes of a FactUpdated (timestamp masked) as the code writes them now
FACT_UPDATED_STATE = (
    '{"timestamp":T,"supersedes_fact_id":"f1","fact_id":"f2","entity_key":"person:ana",'
    '"linked_entities":["person:bo"],"attribute_key":"res","text":"Ana lives in f2",'
    '"category":"general","confidence":0.9,"importance":0.5,"source_message_id":"m1",'
    '"source_message_ids":["m1"],'
    '"speaker":"Ana","valid_from":{"_type_":"datetime_iso","_data_":"2024-01-01T00:00:00+00:00"},'
    '"decided_by":{"by":"x"},"class_version":2}'
)
# ... and as every version before facts had several sources wrote them (class version 1)
FACT_UPDATED_STATE_V1 = (
    '{"timestamp":T,"supersedes_fact_id":"f1","fact_id":"f2","entity_key":"person:ana",'
    '"linked_entities":["person:bo"],"attribute_key":"res","text":"Ana lives in f2",'
    '"category":"general","confidence":0.9,"importance":0.5,"source_message_id":"m1",'
    '"speaker":"Ana","valid_from":{"_type_":"datetime_iso","_data_":"2024-01-01T00:00:00+00:00"},'
    '"decided_by":{"by":"x"}}'
)


def payload(fid: str) -> FactPayload:
    return FactPayload(
        fact_id=fid, entity_key="person:ana", linked_entities=["person:bo"], attribute_key="res",
        text=f"Ana lives in {fid}", category="general", confidence=0.9, importance=0.5,
        source_message_id="m1", source_message_ids=["m1"], speaker="Ana", valid_from=T,
        decided_by=BY,
    )


def story(agent: str = "a") -> tuple[AgentMemory, MessageRecord]:
    """One event of every type."""
    mem = AgentMemory(agent_id=agent)
    mem.register_entity("person:ana", "Ana", "person", "m1", BY, ["Annie"])
    mem.register_entity("person:bo", "Bo", "person", "m1", BY)
    mem.register_entity("person:cy", "Cy", "person", "m1", BY)
    mem.add_alias("person:ana", "Anita", "m1")
    mem.observe_relationship("person:ana", "person:bo", "knows", "m1", T)
    mem.add_fact(payload("f1"))
    mem.update_fact("f1", payload("f2"))
    mem.add_fact(payload("f3"))
    mem.confirm_fact("f2", "m2", T)
    mem.retract_fact("f3", "m3", T, "gone", BY)
    mem.reject("m1", {"x": 1}, "bad")
    mem.merge_entities("person:cy", "person:bo", "m4", "same")
    rec = MessageRecord(agent_id=agent, message_id="m1", session_id=None, speaker="Ana",
                        text="hi", occurred_at=T, metadata={})
    rec.defer_extraction("LLM call failed: connection refused", 3)
    rec.complete({"extractor": "x"}, {"facts": []}, None, None, 1, {"ADD": 1})
    return mem, rec


def _masked(state: bytes) -> str:
    return re.sub(r'"timestamp":\{[^}]*\}', '"timestamp":T', state.decode())


def _legacy(stored: StoredEvent) -> StoredEvent:
    """The same event as stored before the move into the ``engramdb`` package."""
    return StoredEvent(
        originator_id=stored.originator_id,
        originator_version=stored.originator_version,
        topic=stored.topic.replace(f"{MODULE}:", f"{LEGACY_MODULE_TOPIC}:"),
        state=stored.state.replace(f'"{MODULE}:'.encode(), f'"{LEGACY_MODULE_TOPIC}:'.encode()),
    )


def _v1(stored: StoredEvent) -> StoredEvent:
    """A fact event as stored before class version 2 (no ``source_message_ids``)."""
    if not stored.topic.endswith((".FactAdded", ".FactUpdated")):
        return stored
    state = json.loads(stored.state)
    assert state.pop("class_version") == 2
    state.pop("source_message_ids")
    return StoredEvent(
        originator_id=stored.originator_id,
        originator_version=stored.originator_version,
        topic=stored.topic,
        state=json.dumps(state, separators=(",", ":"), ensure_ascii=False).encode(),
    )


def _state(aggregate: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(aggregate).items() if k not in ("_pending_events",)}


def test_topics_and_field_order_are_unchanged() -> None:
    mapper = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}).mapper
    mem, rec = story()
    seen: dict[str, list[str]] = {}
    for event in [*mem.collect_events(), *rec.collect_events()]:
        stored = mapper.to_stored_event(event)
        module, _, name = stored.topic.partition(":")
        assert module == MODULE
        seen[name] = list(json.loads(stored.state))
        if name == "AgentMemory.FactUpdated":
            assert _masked(stored.state) == FACT_UPDATED_STATE
        if name in ("AgentMemory.FactAdded", "AgentMemory.FactUpdated"):
            assert isinstance(event, FactPayload)
    assert seen == FIELD_ORDER


def test_events_stored_under_pre_package_topics_load_and_fold_identically(
    fresh_schema: Any,
) -> None:
    _, env = fresh_schema("legacy")
    app = EventLog(env)
    try:
        mem, rec = story("legacy-agent")
        events = [*mem.collect_events(), *rec.collect_events()]
        # as really stored then: unencrypted (the plain mapper, before ADR-0018), old module
        # topics AND fact events of class version 1
        stored = [_legacy(_v1(_PLAIN.to_stored_event(e))) for e in events]
        assert all(s.topic.startswith(f"{LEGACY_MODULE_TOPIC}:") for s in stored)
        assert b'"domain.aggregate:AgentMemory"' in stored[0].state  # Opened's originator_topic
        app.recorder.insert_events(stored)

        loaded_mem = app.repository.get(mem.id)
        loaded_rec = app.repository.get(rec.id)
        assert type(loaded_mem) is AgentMemory and type(loaded_rec) is MessageRecord
        assert _state(loaded_mem) == _state(mem)
        assert _state(loaded_rec) == _state(rec)

        loaded = list(app.events.get(mem.id))
        assert [type(e) for e in loaded] == [type(e) for e in events[: len(loaded)]]
        assert fold_facts(loaded) == fold_facts(events[: len(loaded)])
        assert set(fold_facts(loaded)) == {"f1", "f2", "f3"}
    finally:
        app.close()


def test_snapshot_stored_under_pre_package_topic_restores_the_aggregate() -> None:
    mapper = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}).mapper
    mem, _ = story()
    stored = _legacy(mapper.to_stored_event(Snapshot.take(mem)))
    assert b'"domain.aggregate:AgentMemory"' in stored.state
    snapshot = mapper.to_domain_event(stored)
    assert isinstance(snapshot, Snapshot)
    restored = snapshot.mutate(None)
    assert type(restored) is AgentMemory
    assert _state(restored) == _state(mem)


def test_version_1_fact_events_load_and_fold_to_their_single_source(fresh_schema: Any) -> None:
    _, env = fresh_schema("v1facts")
    app = EventLog(env)
    try:
        mem, rec = story("v1-agent")
        nameless = payload("f4")
        mem.add_fact(FactPayload(**{
            **nameless.payload_fields(), "source_message_id": None, "source_message_ids": [],
        }))
        events = [*mem.collect_events(), *rec.collect_events()]
        stored = [_v1(_PLAIN.to_stored_event(e)) for e in events]
        updated = next(s for s in stored if s.topic.endswith(".FactUpdated"))
        assert _masked(updated.state) == FACT_UPDATED_STATE_V1  # byte for byte the old format
        app.recorder.insert_events(stored)

        loaded_mem = app.repository.get(mem.id)
        assert _state(loaded_mem) == _state(mem)
        loaded = list(app.events.get(mem.id))
        facts = [e for e in loaded if isinstance(e, (AgentMemory.FactAdded, AgentMemory.FactUpdated))]
        assert [e.source_message_ids for e in facts] == [["m1"], ["m1"], ["m1"], []]
        rows = fold_facts(loaded)
        assert rows == fold_facts(events[: len(loaded)])
        assert rows["f1"].source_message_ids == ["m1"]
        assert rows["f2"].source_message_ids == ["m1", "m2"]  # + its confirmation, as before
        assert rows["f4"].source_message_ids == []
    finally:
        app.close()


def test_version_2_fact_events_keep_several_sources() -> None:
    mapper = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}).mapper
    mem = AgentMemory(agent_id="a")
    mem.register_entity("person:ana", "Ana", "person", "m1", BY)
    mem.register_entity("person:bo", "Bo", "person", "m1", BY)
    mem.add_fact(FactPayload(**{**payload("f1").payload_fields(), "source_message_ids": [
        "m1", "m0", "m-1",
    ]}))
    events = mem.collect_events()
    loaded = [mapper.to_domain_event(mapper.to_stored_event(e)) for e in events]
    assert fold_facts(loaded)["f1"].source_message_ids == ["m1", "m0", "m-1"]


# ADR-0052: the two job events an LLM writes name its model — class version 2, ``model`` last
JOBS_FIELD_ORDER = {
    "AgentJobs.ProfileRefreshed": [
        "timestamp", "agent_id", "entity_key", "text", "method", "fact_ids", "llm_output",
        "reference_time", "model", "class_version",
    ],
    "AgentJobs.ConsolidationReviewed": [
        "timestamp", "agent_id", "method", "input_digest", "llm_output", "pattern_ids", "model",
        "class_version",
    ],
}


def _jobs_story() -> AgentJobs:
    jobs = AgentJobs(agent_id="a")
    jobs.refresh_profile("person:ana", "Ana lives in Porto.", "llm:profile/v1", ["f1"], T,
                         llm_output="Ana lives in Porto.", model="openai:profiles-model")
    jobs.review_consolidation("llm:consolidation/v1", "d1", '{"patterns":[]}', [],
                              model="openai:review-model")
    return jobs


def test_job_events_that_name_their_model_are_version_2() -> None:
    mapper = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}).mapper
    seen = {}
    for event in _jobs_story().collect_events():
        stored = mapper.to_stored_event(event)
        name = stored.topic.partition(":")[2]
        if name in JOBS_FIELD_ORDER:
            seen[name] = json.loads(stored.state)
    assert {n: list(s) for n, s in seen.items()} == JOBS_FIELD_ORDER
    assert seen["AgentJobs.ProfileRefreshed"]["model"] == "openai:profiles-model"
    assert seen["AgentJobs.ConsolidationReviewed"]["class_version"] == 2


def test_version_1_job_events_load_with_no_model() -> None:
    """As stored before ADR-0052 (no ``model``, no ``class_version``): they load, with
    ``model = None``, into the same aggregate state."""
    mapper = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}).mapper
    jobs = _jobs_story()
    events = jobs.collect_events()
    loaded = []
    for event in events:
        stored = mapper.to_stored_event(event)
        if stored.topic.partition(":")[2] in JOBS_FIELD_ORDER:
            state = json.loads(stored.state)
            state.pop("model"), state.pop("class_version")
            stored = StoredEvent(
                originator_id=stored.originator_id, originator_version=stored.originator_version,
                topic=stored.topic, state=json.dumps(state, separators=(",", ":")).encode(),
            )
        loaded.append(mapper.to_domain_event(stored))
    models = [getattr(e, "model", "absent") for e in loaded
              if isinstance(e, (AgentJobs.ProfileRefreshed, AgentJobs.ConsolidationReviewed))]
    assert models == [None, None]
    restored: Any = None
    for event in loaded:
        restored = event.mutate(restored)
    assert _state(restored) == _state(jobs)
