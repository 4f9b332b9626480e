""" "I no longer work at X, I now work at Y": one UPDATE of the job, not a RETRACT plus an ADD.

Why: read clause by clause, the negation retracts the known job and the new job then
targets a fact that is no longer active — reconciliation rejects that UPDATE and stores the
new job as a plain ADD, so the history link (Y superseded X) is lost; with no known job in
view the negation becomes a stray fact "Rita no longer works at X" beside the new one.
A negation of an attribute followed, in the same message, by a new value of that attribute
for the same subject is therefore folded into the new value: its target (if the negation
found one) becomes the new statement's ``UPDATE`` target, and the negation itself goes.
"""

from __future__ import annotations

from engramdb.domain.extraction import ExtractedFact
from engramdb.domain.text import fold_case
from engramdb.services.extraction.rule_based.patterns import NEGATIONS


def negated_attribute(clause: str) -> str | None:
    return next((attr for attr, rx in NEGATIONS if rx.search(clause)), None)


def merge_negations(facts: list[ExtractedFact], sources: list[str]) -> list[ExtractedFact]:
    """``facts`` (read from ``sources``, one clause each) with negations folded as above."""
    facts = list(facts)
    dropped: set[int] = set()
    for i, (fact, source) in enumerate(zip(facts, sources, strict=True)):
        attribute = negated_attribute(source) if source else None
        if attribute is None:
            continue
        later = next(
            (
                j
                for j in range(i + 1, len(facts))
                if j not in dropped
                and facts[j].action != "RETRACT"
                and facts[j].attribute_key == attribute
                and fold_case(facts[j].entity) == fold_case(fact.entity)
            ),
            None,
        )
        if later is None:
            continue
        dropped.add(i)
        if fact.action == "RETRACT" and fact.target_fact_id and facts[later].action == "NEW":
            facts[later] = facts[later].model_copy(
                update={"action": "UPDATE", "target_fact_id": fact.target_fact_id}
            )
    return [f for i, f in enumerate(facts) if i not in dropped]
