"""The one shape of a fact's content: what ADD and UPDATE carry, and what folds read.

Why a type of its own: the same thirteen fields travel from reconciliation (``domain.decisions``)
through the aggregate's ``FactAdded``/``FactUpdated`` events (which inherit them, so the events
ARE payloads) to the fact fold and the projectors. Declaring them once means a new field is
one edit, and the type checker follows a fact end to end instead of trusting a dict.

Field order is the stored-event order: events serialise their fields in declaration order, so
reordering these would change the bytes written for new events (loading old ones would still
work). Keep it; ``tests/integration/test_event_format.py`` pins it.

Provenance: ``source_message_id`` is the message being processed; ``source_message_ids`` is
that message first, then the other messages the extractor cited for the fact (an extractor
that sees recent turns may draw one fact from several). It was added in class version 2 of
the fact events; version-1 events, stored without it, are upcast to ``[source_message_id]``
(``upcast_single_source``), which is exactly what the fold derived from them before.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

#: At most this many source messages per fact (the processed one included): provenance is for
#: finding the turns a fact rests on, not an unbounded list an extractor could inflate.
MAX_SOURCE_MESSAGES = 16


@dataclass(frozen=True)
class FactPayload:
    """A fact as decided: subject, statement, provenance (lists/dicts are stored as given)."""

    fact_id: str
    entity_key: str
    linked_entities: list[str]
    attribute_key: str | None
    text: str
    category: str
    confidence: float
    importance: float
    source_message_id: str | None
    source_message_ids: list[str]
    speaker: str | None
    valid_from: datetime
    decided_by: dict[str, Any]

    def payload_fields(self) -> dict[str, Any]:
        """The fields as keyword arguments for ``trigger_event`` (shallow, in order)."""
        return {f.name: getattr(self, f.name) for f in fields(FactPayload)}


def fact_sources(message_id: str | None, cited: Iterable[str] = ()) -> list[str]:
    """``source_message_ids`` for a fact of ``message_id``: it first, then ``cited`` deduped in
    order, capped at ``MAX_SOURCE_MESSAGES``. Callers pass only ids they have verified."""
    out: list[str] = [message_id] if message_id else []
    for mid in cited:
        if len(out) >= MAX_SOURCE_MESSAGES:
            break
        if mid and mid not in out:
            out.append(mid)
    return out


def check_sources(fact: FactPayload) -> str | None:
    """Why ``fact``'s sources break the invariant ``fact_sources`` establishes, or None."""
    sources = fact.source_message_ids
    if not isinstance(sources, list) or not all(isinstance(m, str) and m for m in sources):
        return "source_message_ids must be a list of message ids"
    head = [fact.source_message_id] if fact.source_message_id else []
    if sources[: len(head)] != head:
        return "source_message_ids must start with the fact's source_message_id"
    if len(set(sources)) != len(sources) or len(sources) > MAX_SOURCE_MESSAGES:
        return f"source_message_ids must be distinct and at most {MAX_SOURCE_MESSAGES}"
    return None


def upcast_single_source(state: dict[str, Any]) -> None:
    """Version 1 -> 2 of ``FactAdded``/``FactUpdated``: the one source becomes the list."""
    single = state.get("source_message_id")
    state["source_message_ids"] = [single] if single else []
