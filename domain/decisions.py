"""Reconciliation: turn one message's extraction into decisions on the agent's memory.

Pure: given the aggregate's state, the extraction and the resolved entities, it calls the
aggregate's commands (which emit events) and reports what it decided. Nothing here does I/O,
so re-deciding on fresh state after a concurrency conflict costs no LLM call.

Rules (docs/spec.md §2.5, ADR-0004):
- same subject + same normalised text as an active fact → NOOP (reinforcement);
- UPDATE with an active target → supersede it; with an unknown/inactive target → the UPDATE
  is rejected and recorded, and the statement is still ADDed (a duplicate beats lost data);
- RETRACT with an active target → DELETE; otherwise rejected and recorded;
- NEW with an ``attribute_key`` that the subject already has an active value for → UPDATE
  (attribute keys name single-valued attributes such as residence);
- anything else → ADD.

An ADD/UPDATE's sources are the message itself, then the messages the extractor cited that
the caller verified (``MessageContext.recorded_citations``); a NOOP only records its message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from engramdb.domain.aggregate import AgentMemory
from engramdb.domain.errors import DecisionRejected
from engramdb.domain.extraction import ExtractedFact, Extraction
from engramdb.domain.keys import fact_fingerprint, match_key, new_fact_id
from engramdb.domain.payloads import FactPayload, fact_sources
from engramdb.domain.resolution import Resolution

DecisionKind = Literal[
    "ADD", "UPDATE", "NOOP", "DELETE", "ENTITY", "ALIAS", "RELATIONSHIP", "REJECTED"
]
DEFAULT_IMPORTANCE = 0.5


@dataclass(frozen=True)
class MessageContext:
    agent_id: str
    message_id: str
    speaker: str | None
    occurred_at: datetime
    decided_by: dict[str, Any]  # ExtractorInfo as a dict: extractor, model, prompt_version
    # Message ids the caller verified as recorded messages of this agent. A fact's cited
    # ``source_message_ids`` outside this set are dropped: the extractor's claim is untrusted.
    recorded_citations: frozenset[str] = frozenset()
    # 0 for a first extraction; n for the n-th reprocess of the message (ADR-0023).
    generation: int = 0


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    fact_id: str | None = None
    target_fact_id: str | None = None
    entity_key: str | None = None
    text: str | None = None
    reason: str | None = None


@dataclass
class DecisionReport:
    decisions: list[Decision] = field(default_factory=list)

    @property
    def rejected(self) -> list[Decision]:
        return [d for d in self.decisions if d.kind == "REJECTED"]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for d in self.decisions:
            out[d.kind] = out.get(d.kind, 0) + 1
        return out


def apply_extraction(
    memory: AgentMemory,
    extraction: Extraction,
    resolutions: Mapping[str, Resolution],
    ctx: MessageContext,
    max_facts: int = 100,
) -> DecisionReport:
    """Apply every decision of one message to ``memory``; invalid ones are rejected alone.

    ``resolutions`` maps folded entity names to their resolution (see ``domain.resolution``);
    a name missing there is a malformed entity and its facts are rejected.
    """
    report = DecisionReport()
    _register_entities(memory, resolutions, ctx, report)
    for ordinal, fact in enumerate(extraction.facts[:max_facts]):
        _decide_fact(memory, fact, ordinal, resolutions, ctx, report)
    for rel in extraction.relationships:
        source, target = resolutions.get(match_key(rel.source)), resolutions.get(match_key(rel.target))
        payload = rel.model_dump()
        if source is None or target is None:
            _reject(
                memory, report, ctx, payload, "relationship names an entity that was not extracted"
            )
            continue
        try:
            memory.observe_relationship(
                source.entity_key,
                target.entity_key,
                rel.relation_type,
                ctx.message_id,
                ctx.occurred_at,
            )
            report.decisions.append(
                Decision(
                    "RELATIONSHIP",
                    entity_key=source.entity_key,
                    text=f"{rel.relation_type} {target.entity_key}",
                )
            )
        except DecisionRejected as exc:
            _reject(memory, report, ctx, payload, exc.reason)
    return report


def _register_entities(
    memory: AgentMemory,
    resolutions: Mapping[str, Resolution],
    ctx: MessageContext,
    report: DecisionReport,
) -> None:
    for res in sorted(resolutions.values(), key=lambda r: (r.entity_key, r.name)):
        key = memory.canonical_entity(res.entity_key)
        try:
            if not memory.has_entity(key):
                display = ctx.speaker if res.kind == "self" and ctx.speaker else res.name
                entity_type = "person" if res.kind == "self" else res.entity_type
                memory.register_entity(key, display, entity_type, ctx.message_id, ctx.decided_by)
                report.decisions.append(Decision("ENTITY", entity_key=key, text=display))
            elif res.kind in ("fuzzy", "llm") and memory.entity_for_alias(res.name) != key:
                memory.add_alias(key, res.name, ctx.message_id)
                report.decisions.append(Decision("ALIAS", entity_key=key, text=res.name))
        except DecisionRejected as exc:
            _reject(memory, report, ctx, {"entity": res.name, "entity_key": key}, exc.reason)


def _decide_fact(
    memory: AgentMemory,
    fact: ExtractedFact,
    ordinal: int,
    resolutions: Mapping[str, Resolution],
    ctx: MessageContext,
    report: DecisionReport,
) -> None:
    payload = fact.model_dump(mode="json")
    primary = resolutions.get(match_key(fact.entity))
    if primary is None:
        _reject(
            memory, report, ctx, payload, f"fact subject {fact.entity!r} is not a resolved entity"
        )
        return
    entity = memory.canonical_entity(primary.entity_key)
    linked = _linked_entities(memory, fact, resolutions, entity)
    existing = memory.active_fact_with_fingerprint(fact_fingerprint(entity, fact.text))
    try:
        if _retract_or_confirm(memory, fact, entity, existing, ctx, report):
            return
    except DecisionRejected as exc:
        _reject(memory, report, ctx, payload, exc.reason)
        return

    new_id = new_fact_id(ctx.agent_id, ctx.message_id, ordinal, ctx.generation)
    new_fact = _new_fact(fact, new_id, entity, linked, ctx)
    target = _superseded(memory, fact, entity, ctx, report, payload)
    try:
        if target is not None:
            memory.update_fact(target, new_fact)
            report.decisions.append(
                Decision(
                    "UPDATE",
                    fact_id=new_id,
                    target_fact_id=target,
                    entity_key=entity,
                    text=fact.text,
                )
            )
        else:
            memory.add_fact(new_fact)
            report.decisions.append(
                Decision("ADD", fact_id=new_id, entity_key=entity, text=fact.text)
            )
    except DecisionRejected as exc:
        _reject(memory, report, ctx, payload, exc.reason)


def _linked_entities(
    memory: AgentMemory, fact: ExtractedFact, resolutions: Mapping[str, Resolution], entity: str
) -> list[str]:
    """The canonical keys of the resolved entities the fact mentions, besides its subject."""
    linked: list[str] = []
    for name in fact.mentions:
        res = resolutions.get(match_key(name))
        if res is not None:
            key = memory.canonical_entity(res.entity_key)
            if key != entity and key not in linked:
                linked.append(key)
    return linked


def _retract_or_confirm(
    memory: AgentMemory,
    fact: ExtractedFact,
    entity: str,
    existing: str | None,
    ctx: MessageContext,
    report: DecisionReport,
) -> bool:
    """A RETRACT (DELETE of its target) or a fact memory already holds (NOOP, confirmed):
    True if decided here; raises ``DecisionRejected`` for a RETRACT without a target."""
    if fact.action == "RETRACT":
        target = fact.target_fact_id or existing
        if target is None:
            raise DecisionRejected("RETRACT without a target fact")
        memory.retract_fact(target, ctx.message_id, ctx.occurred_at, fact.text, ctx.decided_by)
        report.decisions.append(
            Decision("DELETE", target_fact_id=target, entity_key=entity, text=fact.text)
        )
        return True
    if existing is not None:
        memory.confirm_fact(existing, ctx.message_id, ctx.occurred_at)
        report.decisions.append(
            Decision("NOOP", fact_id=existing, entity_key=entity, text=fact.text)
        )
        return True
    return False


def _new_fact(
    fact: ExtractedFact, new_id: str, entity: str, linked: list[str], ctx: MessageContext
) -> FactPayload:
    return FactPayload(
        fact_id=new_id,
        entity_key=entity,
        linked_entities=linked,
        attribute_key=fact.attribute_key,
        text=fact.text.strip(),
        category=fact.category,
        confidence=fact.confidence,
        importance=DEFAULT_IMPORTANCE,
        source_message_id=ctx.message_id,
        source_message_ids=fact_sources(
            ctx.message_id, (m for m in fact.source_message_ids if m in ctx.recorded_citations)
        ),
        speaker=ctx.speaker,
        valid_from=ctx.occurred_at,
        decided_by=ctx.decided_by,
    )


def _superseded(
    memory: AgentMemory,
    fact: ExtractedFact,
    entity: str,
    ctx: MessageContext,
    report: DecisionReport,
    payload: dict[str, Any],
) -> str | None:
    """The active fact the new one supersedes: an UPDATE's target if still active, else the
    subject's active fact with the same attribute. An UPDATE whose target is gone is recorded
    as rejected only when nothing takes its place (it is then added): when the target was
    already replaced by a fact of the same attribute — "I moved to Porto Alegre", then "I live
    in Porto Alegre" aimed at the old Recife fact — updating the current one is what the
    extractor meant, and a rejection on that happy path only confused (issue 27)."""
    target = fact.target_fact_id if fact.action == "UPDATE" else None
    if target is not None and memory.is_active(target):
        return target  # the common case: no scan of the active facts
    same_attribute = (
        memory.active_facts_with_attribute(entity, fact.attribute_key) if fact.attribute_key else []
    )
    if target is not None and not same_attribute:
        _reject(
            memory,
            report,
            ctx,
            payload,
            f"UPDATE targets {target!r}, which is not an active fact of this agent; added instead",
        )
    return same_attribute[0] if same_attribute else None


def _reject(
    memory: AgentMemory,
    report: DecisionReport,
    ctx: MessageContext,
    payload: dict[str, Any],
    reason: str,
) -> None:
    memory.reject(ctx.message_id, payload, reason)
    report.decisions.append(Decision("REJECTED", reason=reason, text=str(payload.get("text", ""))))
