"""What the change stream says about one logged event (ADR-0049): a memory decision as a
small JSON-ready dict, or None for events that are not memory changes (message records,
retrieval counts, internal job bookkeeping).

Why from the log and not from the write path: the log is the order of record. A change fed
from it is published only after it is committed, in log order (so in order per agent), from
any process's writes (ingest, HTTP, jobs, imports), and a publisher that stops resumes at the
last position it published — the position is the change's dedupe id. Shapes carry ids, kind,
position and times; fact and entity text only for the agent's own subject (a subscriber that
may read the subject may read the agent's memory), never for an erased agent (its events no
longer decrypt, so they map to nothing, and the publisher purges its subject).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from eventsourcing.utils import resolve_topic

from engramdb.domain.aggregate import AgentMemory
from engramdb.domain.jobs import AgentJobs

_FACTS: dict[type, str] = {
    AgentMemory.FactAdded: "fact.added",
    AgentMemory.FactUpdated: "fact.updated",
    AgentMemory.FactConfirmed: "fact.confirmed",
    AgentMemory.FactRetracted: "fact.retracted",
    AgentMemory.EntityRegistered: "entity.created",
    AgentMemory.EntityAliased: "entity.aliased",
    AgentMemory.EntitiesMerged: "entity.merged",
    AgentMemory.RelationshipObserved: "entity.linked",
    AgentMemory.Forgotten: "agent.forgotten",
    AgentMemory.Erased: "agent.erased",
    AgentMemory.CorrectionNoted: "fact.corrected",
    AgentJobs.PatternObserved: "pattern.observed",
    AgentJobs.PatternRetired: "pattern.retired",
    AgentJobs.ProfileRefreshed: "profile.refreshed",
}
_FIELDS = ("fact_id", "supersedes_fact_id", "entity_key", "attribute_key", "text", "category",
           "source_message_ids", "valid_from", "retracted_at", "reason", "display_name",
           "entity_type", "alias", "source_key", "target_key", "relation_type", "merged_key",
           "into_key", "message_id", "pattern_id", "corrected_fact_id", "forgotten_at",
           "erased_at", "decided_by")


def change_kind(event: Any) -> str | None:
    return _FACTS.get(type(event))


_DECODED = frozenset((*_FACTS, AgentMemory.Opened))  # Opened: it names an aggregate's agent


@lru_cache(maxsize=256)
def may_be_change(topic: str) -> bool:
    """Whether a stored event of ``topic`` can be a change (or the ``Opened`` that names its
    agent), so that a follower of the log decodes only those notifications. By the class the
    topic resolves to — events stored before ADR-0007 name the module ``domain.aggregate``;
    a topic that does not resolve is decoded, and the mapper says what it is."""
    try:
        return resolve_topic(topic) in _DECODED
    except Exception:  # noqa: BLE001 - unknown topic: let the decoder decide
        return True


def change_of(position: int, agent_id: str, event: Any) -> dict[str, Any] | None:
    """The change record of the event at ``position`` of ``agent_id``'s log, or None."""
    kind = change_kind(event)
    if kind is None:
        return None
    out: dict[str, Any] = {
        "kind": kind, "agent_id": agent_id, "position": position,
        "aggregate_version": event.originator_version, "time": event.timestamp.isoformat(),
    }
    state = event.__dict__
    for name in _FIELDS:
        if name in state and state[name] is not None:
            value = state[name]
            out[name] = value.isoformat() if hasattr(value, "isoformat") else value
    if kind == "agent.erased":  # the marker holds no personal data; keep it that way
        out = {k: v for k, v in out.items() if k not in ("text", "decided_by")}
    return out
