"""The agent aggregate's invariants and the reconciliation rules, without any I/O."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engramdb.domain.aggregate import AgentMemory, MessageRecord
from engramdb.domain.decisions import MessageContext, apply_extraction
from engramdb.domain.errors import DecisionRejected
from engramdb.domain.extraction import ConfidenceLevel, ExtractedEntity, ExtractedFact, Extraction
from engramdb.domain.keys import agent_aggregate_id, match_key, message_record_id
from engramdb.domain.resolution import resolve_name

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def ctx(message_id: str, speaker: str | None = "Ana") -> MessageContext:
    return MessageContext("agent-1", message_id, speaker, T0, {"extractor": "test"})


def decide(memory: AgentMemory, extraction: Extraction, message_id: str, speaker: str | None = "Ana"):
    names: dict[str, tuple[str, str]] = {}
    for e in extraction.entities:
        names[match_key(e.name)] = (e.name, e.entity_type)
    for f in extraction.facts:
        names.setdefault(match_key(f.entity), (f.entity, "person"))
        for m in f.mentions:
            names.setdefault(match_key(m), (m, "thing"))
    resolutions = {}
    pending: dict[str, str] = {}
    for folded, (name, etype) in names.items():
        res = resolve_name(memory, name, etype, speaker, pending=pending)
        pending[folded] = res.entity_key
        resolutions[folded] = res
    return apply_extraction(memory, extraction, resolutions, ctx(message_id, speaker))


def fact(text: str, **kw) -> ExtractedFact:
    kw.setdefault("entity", "Ana")
    return ExtractedFact(text=text, **kw)


def test_ids_are_derived_from_agent_and_message():
    assert AgentMemory(agent_id="a").id == agent_aggregate_id("a")
    assert agent_aggregate_id("a") != agent_aggregate_id("b")
    record = MessageRecord(
        agent_id="a", message_id="m", session_id=None, speaker=None, text="x", occurred_at=T0, metadata={}
    )
    assert record.id == message_record_id("a", "m")


def test_add_then_same_statement_is_a_noop_reinforcement():
    memory = AgentMemory(agent_id="agent-1")
    first = decide(memory, Extraction(facts=[fact("Ana lives in Porto Alegre")]), "m1")
    assert [d.kind for d in first.decisions] == ["ENTITY", "ADD"]
    again = decide(memory, Extraction(facts=[fact("ana lives in  Porto Alegre!")]), "m2")
    assert [d.kind for d in again.decisions] == ["NOOP"]
    assert again.decisions[0].fact_id == first.decisions[1].fact_id


def test_update_supersedes_an_active_fact_and_the_old_one_stops_being_active():
    memory = AgentMemory(agent_id="agent-1")
    added = decide(memory, Extraction(facts=[fact("Ana lives in Recife", attribute_key="residence")]), "m1")
    old_id = added.decisions[-1].fact_id
    updated = decide(
        memory,
        Extraction(facts=[fact("Ana lives in Porto Alegre", action="UPDATE", target_fact_id=old_id)]),
        "m2",
    )
    assert updated.decisions[-1].kind == "UPDATE"
    assert updated.decisions[-1].target_fact_id == old_id
    assert not memory.is_active(old_id)
    assert memory.is_active(updated.decisions[-1].fact_id)


def test_new_value_of_a_single_valued_attribute_supersedes_the_old_value():
    memory = AgentMemory(agent_id="agent-1")
    old = decide(memory, Extraction(facts=[fact("Ana works at Vertix", attribute_key="workplace")]), "m1")
    new = decide(memory, Extraction(facts=[fact("Ana works at Nubank", attribute_key="workplace")]), "m2")
    assert new.decisions[-1].kind == "UPDATE"
    assert new.decisions[-1].target_fact_id == old.decisions[-1].fact_id


def test_update_of_unknown_fact_is_rejected_and_recorded_but_the_statement_is_kept():
    memory = AgentMemory(agent_id="agent-1")
    report = decide(
        memory, Extraction(facts=[fact("Ana likes tea", action="UPDATE", target_fact_id="f_nope")]), "m1"
    )
    kinds = [d.kind for d in report.decisions]
    assert kinds == ["ENTITY", "REJECTED", "ADD"]
    assert "f_nope" in (report.rejected[0].reason or "")
    events = [type(e).__name__ for e in memory.collect_events()]
    assert "DecisionRejected" in events and "FactAdded" in events


def test_retract_of_inactive_fact_is_rejected_alone():
    memory = AgentMemory(agent_id="agent-1")
    added = decide(memory, Extraction(facts=[fact("Ana has a cat")]), "m1")
    fid = added.decisions[-1].fact_id
    report = decide(
        memory,
        Extraction(
            facts=[
                fact("Ana no longer has a cat", action="RETRACT", target_fact_id=fid),
                fact("Ana no longer has a cat", action="RETRACT", target_fact_id=fid),
                fact("Ana has a dog"),
            ]
        ),
        "m2",
    )
    assert [d.kind for d in report.decisions] == ["DELETE", "REJECTED", "ADD"]
    assert not memory.is_active(fid)


def test_entity_keys_are_unique_per_agent():
    memory = AgentMemory(agent_id="agent-1")
    memory.register_entity("person:bruno", "Bruno", "person", None, {})
    with pytest.raises(DecisionRejected):
        memory.register_entity("person:bruno", "Bruno B.", "person", None, {})


def test_first_person_resolves_to_the_speaker_and_fuzzy_names_merge():
    memory = AgentMemory(agent_id="agent-1")
    decide(
        memory,
        Extraction(
            entities=[ExtractedEntity(name="Carolina", entity_type="person")],
            facts=[fact("I am friends with Carolina", entity="I", mentions=["Carolina"])],
        ),
        "m1",
        speaker="Melanie",
    )
    assert memory.has_entity("person:melanie")
    assert memory.has_entity("person:carolina")
    res = resolve_name(memory, "Caroline", "person", "Melanie")
    assert res.kind == "fuzzy" and res.entity_key == "person:carolina"
    # first names of different people are not merged by similarity alone
    assert resolve_name(memory, "Melissa", "person", "Bob").entity_key != "person:melanie"


def test_relationship_to_unknown_entity_is_rejected():
    memory = AgentMemory(agent_id="agent-1")
    memory.register_entity("person:ana", "Ana", "person", None, {})
    with pytest.raises(DecisionRejected):
        memory.observe_relationship("person:ana", "person:ghost", "knows", None, T0)


def test_confidence_levels_map_to_spec_values():
    assert fact("x", confidence_level=ConfidenceLevel.explicit_statement).confidence == 0.95
    assert fact("x", confidence_level=ConfidenceLevel.speculation).confidence == 0.40
    assert fact("x").confidence == 0.60


def test_merge_moves_aliases_and_facts_to_the_surviving_entity():
    memory = AgentMemory(agent_id="agent-1")
    decide(memory, Extraction(facts=[fact("Carol likes jazz", entity="Carol")]), "m1")
    decide(memory, Extraction(facts=[fact("Carolina plays piano", entity="Carolina")]), "m2")
    memory.merge_entities("person:carol", "person:carolina", "m3", "same person")
    assert memory.entity_for_alias("Carol") == "person:carolina"
    assert all(entry[0] == "person:carolina" for entry in memory.active_facts.values())
