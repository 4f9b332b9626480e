"""Reconciliation of facts a client decided itself (``add_facts``, ADR-0049).

Why not ``apply_extraction``: an extracted fact belongs to the message being processed — its
id, first source and valid time come from that message. A client fact has no such message:
its sources are the turns the client names (verified by the caller, possibly none), its valid
time is the client's, and its provenance is ``decided_by.extractor = "client"``. The decision
itself is the same as for an extracted fact (docs/spec.md §2.5): same subject and normalised
text as an active fact → NOOP (confirmed), same single-valued ``attribute_key`` → UPDATE,
else ADD. A ``valid_to`` the client gives (in the past: a fact that already ended) is a
``FactRetracted`` at that instant with reason ``CLIENT_VALID_TO``, so ``facts_as_of`` shows
the fact inside its window and nowhere else, and its source turns stay retrievable.

Pure: the caller resolved the subjects and verified the sources; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engramdb.domain.aggregate import CLIENT_VALID_TO, AgentMemory
from engramdb.domain.decisions import DEFAULT_IMPORTANCE, Decision, DecisionReport
from engramdb.domain.errors import DecisionRejected
from engramdb.domain.keys import fact_fingerprint, match_key, new_fact_id
from engramdb.domain.payloads import FactPayload, fact_sources
from engramdb.domain.resolution import Resolution

#: ``ExtractorInfo.extractor`` of a client's fact: who decided it.
CLIENT = "client"
#: A client fact's confidence: the client stated it outright.
CLIENT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class ClientFactSpec:
    """One fact as the client decided it; ``sources`` are verified recorded turns."""

    subject: str
    text: str
    valid_from: datetime
    valid_to: datetime | None = None
    sources: tuple[str, ...] = ()
    attribute_key: str | None = None
    category: str = "general"
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ClientBatch:
    """One ``add_facts`` call: the seed of its fact ids and the provenance of its decisions."""

    agent_id: str
    batch_id: str
    decided_by: Mapping[str, Any]


def apply_client_facts(
    memory: AgentMemory,
    facts: Sequence[ClientFactSpec],
    resolutions: Mapping[str, Resolution],
    batch: ClientBatch,
) -> DecisionReport:
    """Apply every fact of one batch to ``memory``; a fact the aggregate refuses is rejected
    alone (recorded as ``DecisionRejected``), the others stand."""
    report = DecisionReport()
    for ordinal, fact in enumerate(facts):
        source = fact.sources[0] if fact.sources else None
        decided_by = {**batch.decided_by, "ordinal": ordinal}
        if fact.metadata:
            decided_by["metadata"] = dict(fact.metadata)
        try:
            _decide(memory, fact, new_fact_id(batch.agent_id, f"{CLIENT}:{batch.batch_id}", ordinal),
                    resolutions, source, decided_by, report)
        except DecisionRejected as exc:
            memory.reject(source, {"subject": fact.subject, "text": fact.text}, exc.reason)
            report.decisions.append(Decision("REJECTED", reason=exc.reason, text=fact.text))
    return report


def _entity(
    memory: AgentMemory, fact: ClientFactSpec, resolutions: Mapping[str, Resolution],
    source: str | None, decided_by: dict[str, Any], report: DecisionReport,
) -> str:
    res = resolutions.get(match_key(fact.subject))
    if res is None:
        raise DecisionRejected(f"fact subject {fact.subject!r} is not a resolved entity")
    key = memory.canonical_entity(res.entity_key)
    if not memory.has_entity(key):
        memory.register_entity(key, res.name, res.entity_type, source, decided_by)
        report.decisions.append(Decision("ENTITY", entity_key=key, text=res.name))
    elif res.kind in ("fuzzy", "llm") and memory.entity_for_alias(res.name) != key:
        memory.add_alias(key, res.name, source)
        report.decisions.append(Decision("ALIAS", entity_key=key, text=res.name))
    return key


def _decide(
    memory: AgentMemory, fact: ClientFactSpec, new_id: str, resolutions: Mapping[str, Resolution],
    source: str | None, decided_by: dict[str, Any], report: DecisionReport,
) -> None:
    entity = _entity(memory, fact, resolutions, source, decided_by, report)
    existing = memory.active_fact_with_fingerprint(fact_fingerprint(entity, fact.text))
    if existing is not None and fact.valid_to is None:
        memory.confirm_fact(existing, source, fact.valid_from)
        report.decisions.append(Decision("NOOP", fact_id=existing, entity_key=entity, text=fact.text))
        return
    payload = FactPayload(
        fact_id=new_id, entity_key=entity, linked_entities=[], attribute_key=fact.attribute_key,
        text=fact.text.strip(), category=fact.category, confidence=CLIENT_CONFIDENCE,
        importance=DEFAULT_IMPORTANCE, source_message_id=source,
        source_message_ids=fact_sources(source, fact.sources[1:]), speaker=None,
        valid_from=fact.valid_from, decided_by=decided_by,
    )
    same = memory.active_facts_with_attribute(entity, fact.attribute_key) if fact.attribute_key else []
    if same and fact.valid_to is None:  # an ended fact supersedes nothing current
        memory.update_fact(same[0], payload)
        report.decisions.append(Decision("UPDATE", fact_id=new_id, target_fact_id=same[0],
                                         entity_key=entity, text=fact.text))
    else:
        memory.add_fact(payload)
        report.decisions.append(Decision("ADD", fact_id=new_id, entity_key=entity, text=fact.text))
    if fact.valid_to is not None:
        memory.retract_fact(new_id, source, fact.valid_to, CLIENT_VALID_TO, decided_by)
        report.decisions.append(Decision("DELETE", target_fact_id=new_id, entity_key=entity,
                                         text=fact.text, reason=CLIENT_VALID_TO))
