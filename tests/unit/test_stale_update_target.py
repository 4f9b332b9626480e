"""An UPDATE aimed at a fact that was already replaced updates the replacement, with no
rejection recorded (issue 27: the demo's happy path showed "DecisionRejected ... not an active
fact of this agent; added instead" followed by a FactUpdated). An UPDATE with no successor to
take is still rejected and added, as before (tests/unit/test_domain.py)."""

from __future__ import annotations

from engramdb.domain.aggregate import AgentMemory
from engramdb.domain.extraction import Extraction
from tests.unit.test_domain import decide, fact


def test_update_of_a_replaced_fact_updates_its_replacement_without_a_rejection() -> None:
    memory = AgentMemory(agent_id="agent-1")
    recife = decide(memory, Extraction(facts=[fact("Ana lives in Recife", attribute_key="residence")]), "m1")
    recife_id = recife.decisions[-1].fact_id
    moved = decide(memory, Extraction(facts=[fact(
        "Ana moved to Porto Alegre", action="UPDATE", target_fact_id=recife_id, attribute_key="residence"
    )]), "m2")
    moved_id = moved.decisions[-1].fact_id
    assert [d.kind for d in moved.decisions if d.kind != "ENTITY"] == ["UPDATE"]
    memory.collect_events()

    again = decide(memory, Extraction(facts=[fact(  # the extractor still aims at Recife
        "Ana lives in Porto Alegre", action="UPDATE", target_fact_id=recife_id, attribute_key="residence"
    )]), "m3")
    assert [d.kind for d in again.decisions] == ["UPDATE"] and not again.rejected
    assert again.decisions[0].target_fact_id == moved_id
    events = [type(e).__name__ for e in memory.collect_events()]
    assert "DecisionRejected" not in events and "FactUpdated" in events
    assert not memory.is_active(moved_id) and memory.is_active(again.decisions[0].fact_id)


def test_update_of_a_gone_fact_without_successor_is_still_rejected_and_added() -> None:
    memory = AgentMemory(agent_id="agent-1")
    report = decide(memory, Extraction(facts=[fact(
        "Ana likes tea", action="UPDATE", target_fact_id="f_gone", attribute_key="drink"
    )]), "m1")
    assert [d.kind for d in report.decisions if d.kind != "ENTITY"] == ["REJECTED", "ADD"]
