"""Pending extractions (ADR-0014): list them, count them, and re-extract them in order.

A message is *pending* when an LLM outage deferred its extraction (``ExtractionDeferred`` on
its ``MessageRecord``) and no ``Processed`` has followed. The list is the
``mem_extraction_pending`` read-model table (projected from those events, so it is rebuilt
like any read model and readable from any process); re-extraction goes through the ordinary
write pipeline, so the new decisions and the LLM's answer are ordinary events — replay and
rebuild never call the LLM.

Why re-extraction stops early: the first message re-extracted in a round is the probe. If the
LLM is still down the round ends there (one failed call, nothing recorded — a deferral per
probe would only fill the log). Once a message of the round has succeeded the LLM is up, so a
later transient failure is that message's own problem: its agent is skipped for this round
(its later messages must not overtake it) and the others go on. ``rotate`` starts each round
at another agent, so one stuck message cannot block the rest forever.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime
from itertools import groupby

import psycopg
from psycopg_pool import ConnectionPool
from pydantic import BaseModel, Field

from engramdb.projections.read_models.conversation import pending_count, pending_rows
from engramdb.services.write.deferred_order import request_from_record
from engramdb.services.write.pipeline import ExtractionUnavailable, WritePipeline

log = logging.getLogger(__name__)


class PendingExtraction(BaseModel):
    """One message waiting for the LLM."""

    agent_id: str
    message_id: str
    recorded_at: datetime
    first_deferred_at: datetime
    last_deferred_at: datetime
    deferrals: int = Field(description="ExtractionDeferred events so far")
    attempts: int = Field(description="extraction attempts those deferrals report, summed")
    reason: str = Field(description="the last outage's error")


class ReprocessReport(BaseModel):
    """What one re-extraction round did."""

    extracted: list[str] = Field(default_factory=list, description="agent_id/message_id, in order")
    skipped: list[str] = Field(
        default_factory=list, description="already processed (the list lagged) or not recorded"
    )
    still_pending: list[str] = Field(default_factory=list, description="the LLM failed again")
    llm_unavailable: str | None = Field(
        default=None, description="the last outage error seen (the LLM may still be down)"
    )
    position: int = Field(default=0, description="notification id to wait for (read-your-writes)")


def list_pending(
    pool: ConnectionPool, agent_id: str | None = None, limit: int | None = None
) -> list[PendingExtraction]:
    """Pending extractions, by agent then recorded order (empty before the table exists)."""
    try:
        with pool.connection() as conn:
            rows = pending_rows(conn, agent_id, limit)
    except psycopg.errors.UndefinedTable:
        return []
    return [PendingExtraction.model_validate(r) for r in rows]


def count_pending(pool: ConnectionPool, agent_id: str | None = None) -> int:
    """How many messages wait for extraction — the gauge for ``/metrics`` and ``status``."""
    try:
        with pool.connection() as conn:
            return pending_count(conn, agent_id)
    except psycopg.errors.UndefinedTable:
        return 0


def _by_agent(items: list[PendingExtraction], rotate: int) -> Iterator[list[PendingExtraction]]:
    groups = [list(g) for _, g in groupby(items, key=lambda p: p.agent_id)]
    if groups:
        start = rotate % len(groups)
        groups = groups[start:] + groups[:start]
    yield from groups


def reextract_pending(
    pipeline: WritePipeline,
    pool: ConnectionPool,
    *,
    agent_id: str | None = None,
    message_id: str | None = None,
    limit: int | None = None,
    rotate: int = 0,
) -> ReprocessReport:
    """Re-run extraction for pending messages (all, one agent's, or one message), each agent's
    in recorded order; see the module doc for when a round stops early."""
    items = list_pending(pool, agent_id, limit)
    if message_id is not None:
        items = [p for p in items if p.message_id == message_id]
    report = ReprocessReport()
    any_success = False
    for group in _by_agent(items, rotate):
        for item in group:
            key = f"{item.agent_id}/{item.message_id}"
            record = pipeline.app.message_record(item.agent_id, item.message_id)
            if record is None or record.processed:
                report.skipped.append(key)
                continue
            request = request_from_record(record)
            try:
                result = pipeline.write(request, on_outage="raise")
            except ExtractionUnavailable as exc:
                report.still_pending.append(key)
                report.llm_unavailable = exc.reason
                if not any_success:
                    return report  # the probe failed: the LLM is still down
                log.warning("re-extraction of %s failed again (LLM up otherwise): %s", key, exc.reason)
                break  # this agent waits for the next round; the others go on
            report.position = max(report.position, result.position)
            if result.duplicate:
                report.skipped.append(key)
            else:
                any_success = True
                report.extracted.append(key)
    return report

