"""The shapes of audit answers: one decision from the log (``HistoryEntry``) and a fact as it
stood (``FactSnapshot``). Apart from ``audit`` so entry points can name them without
importing the use case (ADR-0043)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from engramdb.domain.fold import FactRow


class HistoryEntry(BaseModel):
    """One decision from the log. For UPDATE, ``fact_id`` is the new fact and
    ``target_fact_id`` the one it superseded; for NOOP/DELETE ``target_fact_id`` is the fact
    confirmed/retracted; for MERGE ``entity_key`` was merged into ``target_entity_key``."""

    version: int  # version of the agent aggregate (position in the agent's log)
    event: str
    decision: str  # ADD UPDATE NOOP DELETE FORGET ERASE ENTITY ALIAS MERGE RELATIONSHIP REJECTED OPENED
    fact_id: str | None = None
    target_fact_id: str | None = None
    entity_key: str | None = None
    target_entity_key: str | None = None
    text: str | None = None
    message_id: str | None = None
    message_text: str | None = None
    valid_at: datetime | None = None  # valid time: when it was true/said in the conversation
    recorded_at: datetime  # transaction time: when memory decided it
    decided_by: dict[str, Any] = Field(default_factory=dict)
    reason: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class FactSnapshot(BaseModel):
    fact_id: str
    entity_key: str
    attribute_key: str | None
    text: str
    category: str
    confidence: float
    status: str
    valid_from: datetime
    valid_to: datetime | None
    recorded_at: datetime
    invalidated_at: datetime | None
    reinforcement_count: int
    supersedes_fact_id: str | None
    superseded_by: str | None
    source_message_ids: list[str]
    decided_by: dict[str, Any]

    @classmethod
    def from_row(cls, row: FactRow) -> FactSnapshot:
        return cls(
            fact_id=row.fact_id, entity_key=row.entity_key, attribute_key=row.attribute_key,
            text=row.fact_text, category=row.category, confidence=row.confidence,
            status=row.status, valid_from=row.valid_from, valid_to=row.valid_to,
            recorded_at=row.recorded_at, invalidated_at=row.invalidated_at,
            reinforcement_count=row.reinforcement_count,
            supersedes_fact_id=row.supersedes_fact_id, superseded_by=row.superseded_by,
            source_message_ids=list(row.source_message_ids), decided_by=dict(row.decided_by),
        )
