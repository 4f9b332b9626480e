"""The one shape of a fact's content: what ADD and UPDATE carry, and what folds read.

Why a type of its own: the same twelve fields travel from reconciliation (``domain.decisions``)
through the aggregate's ``FactAdded``/``FactUpdated`` events (which inherit them, so the events
ARE payloads) to the fact fold and the projectors. Declaring them once means a new field is
one edit, and the type checker follows a fact end to end instead of trusting a dict.

Field order is the stored-event order: events serialise their fields in declaration order, so
reordering these would change the bytes written for new events (loading old ones would still
work). Keep it; ``tests/test_event_format.py`` pins it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any


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
    speaker: str | None
    valid_from: datetime
    decided_by: dict[str, Any]

    def payload_fields(self) -> dict[str, Any]:
        """The fields as keyword arguments for ``trigger_event`` (shallow, in order)."""
        return {f.name: getattr(self, f.name) for f in fields(FactPayload)}
