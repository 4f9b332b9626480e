"""Re-extract already processed messages (issue 11 item 4, ADR-0023): after a better model,
a fixed prompt, or to repair what an outage-era fallback decided.

Why it works this way:
- **New events, never edits.** For each message, the facts its earlier extraction(s) created
  that are still active and sourced *only* from it end with a ``FactRetracted`` (reason
  ``reprocessed``, ``decided_by.via = "reprocess"``); a fact another message confirmed or
  cited stays (that message vouches for it too). The message then goes through the write
  pipeline's own stages (pre-retrieval, extraction, resolution, reconciliation) on the
  aggregate with those facts already ended, and the decisions, the retractions and the
  record's ``Reprocessed`` event are saved in ONE commit — all or nothing.
- **New fact ids.** A re-extracted fact gets ``new_fact_id(..., generation)``, so it never
  reuses the id of the fact it replaces: history shows the old one ended and the new one added.
- **Recorded order.** ``--agent`` alone reprocesses the agent's processed messages in
  recorded (``occurred_at``) order, each against the memory the previous ones left.
- Replay and rebuild read the new events: they never call the LLM.
- **A turn stored with ``infer=False`` stays unextracted** (ADR-0049): the caller decided no
  extraction for it, and a better model does not change that decision. Its outcome (one
  message) or the result's ``stored_only`` list (``--agent``) says so.
"""

from __future__ import annotations

import time
from typing import Any

from eventsourcing.persistence import RecordConflictError
from psycopg_pool import ConnectionPool

from engramdb.domain.aggregate import REPROCESSED, AgentMemory
from engramdb.domain.decisions import MessageContext
from engramdb.domain.extraction import STORED_ONLY_EXTRACTORS
from engramdb.domain.fold import fold_facts
from engramdb.domain.keys import agent_aggregate_id, message_record_id
from engramdb.services.management import queries
from engramdb.services.management.models import (
    MessageFilter,
    NotActiveError,
    NotFoundError,
    ReprocessOutcome,
    ReprocessResult,
)
from engramdb.services.write.citations import recorded_citations
from engramdb.services.write.entity_resolution import ResolutionMemo
from engramdb.services.write.pipeline import WritePipeline


def _owned_active_facts(pipeline: WritePipeline, memory: AgentMemory, message_id: str) -> list[str]:
    """Active facts whose only source is ``message_id`` (from the log, not a read model)."""
    rows = fold_facts(
        (e for e in pipeline.app.agent_events(memory.agent_id) if isinstance(e, AgentMemory.Event)),
        memory.agent_id,
    )
    return sorted(
        fid for fid, row in rows.items()
        if memory.is_active(fid) and row.source_message_id == message_id
        and set(row.source_message_ids or [message_id]) == {message_id}
    )


def reprocess_message(pipeline: WritePipeline, agent_id: str, message_id: str) -> tuple[ReprocessOutcome, int]:
    """Reprocess one processed message; returns (outcome, position). ``NotFoundError`` when
    the message was never recorded; ``NotActiveError`` when it is not processed yet."""
    app = pipeline.app
    agent_uuid = agent_aggregate_id(agent_id)
    record_uuid = message_record_id(agent_id, message_id)
    with pipeline.agent_lock(agent_id):
        for attempt in range(pipeline.config.max_conflict_retries + 1):
            record = app.message_record(agent_id, message_id)
            if record is None:
                raise NotFoundError(f"agent {agent_id!r} has no message {message_id!r}")
            if not record.processed:
                raise NotActiveError(
                    f"message {message_id!r} is not processed yet; pending extractions are "
                    "re-extracted by `engramdb reprocess --failed` (or the serve retrier)"
                )
            if record.stored_only:  # infer=False: the caller asked for no extraction
                return ReprocessOutcome(message_id=message_id, generation=record.generation,
                                        stored_only=True), 0
            memory = app.agent_memory(agent_id)
            generation = record.generation + 1
            ended = _owned_active_facts(pipeline, memory, message_id)
            decided_by = {"via": "reprocess", "generation": generation}
            for fid in ended:
                memory.retract_fact(fid, message_id, record.occurred_at, REPROCESSED, decided_by)
            extraction_input = pipeline._extraction_input(record, memory)
            extraction_input = extraction_input.model_copy(update={"known_facts": [
                f for f in extraction_input.known_facts if f.fact_id not in ended
            ]})
            extraction, error, raw, llm_calls, info, transient = pipeline._extract(extraction_input)
            if transient:  # an outage is not an answer (ADR-0014): change nothing
                app.forget_cached(agent_uuid)
                return ReprocessOutcome(
                    message_id=message_id, generation=record.generation, extraction_error=error,
                    llm_unavailable=True,
                ), 0
            info_dict: dict[str, Any] = {**info.model_dump(), "via": "reprocess"}
            ctx = MessageContext(
                agent_id=agent_id, message_id=message_id, speaker=record.speaker,
                occurred_at=record.occurred_at, decided_by=info_dict,
                recorded_citations=recorded_citations(
                    app, agent_id, message_id, record.created_on, extraction
                ),
                generation=generation,
            )
            memo = ResolutionMemo()
            memory, report, notes = pipeline._decide(memory, extraction, record, ctx, memo)
            if ended and memory.is_active(ended[0]):  # a fallback reloaded the aggregate
                app.forget_cached(agent_uuid)
                raise RuntimeError(f"reprocess of {message_id!r} failed to reconcile: {notes}")
            errors = "; ".join(e for e in [error, *notes] if e) or None
            record.reprocessed(
                extractor=info_dict, extraction=extraction.model_dump(mode="json"), raw_output=raw,
                error=errors, llm_calls=llm_calls + memo.llm_calls, decisions=report.counts(),
                ended_fact_ids=ended,
            )
            try:
                recordings = pipeline.commits.save(memory, record)
            except RecordConflictError:
                app.forget_cached(agent_uuid, record_uuid)
                time.sleep(pipeline.config.conflict_backoff_sec * (attempt + 1))
                continue
            except BaseException:
                app.forget_cached(agent_uuid, record_uuid)
                raise
            outcome = ReprocessOutcome(
                message_id=message_id, generation=generation, ended_fact_ids=ended,
                decisions=report.counts(), extraction_error=errors,
            )
            return outcome, (recordings[-1].notification.id if recordings else 0)
    raise RecordConflictError(f"agent {agent_id!r} kept changing; try again")


def reprocess(
    pipeline: WritePipeline, pool: ConnectionPool, agent_id: str, message_id: str | None = None
) -> ReprocessResult:
    """Reprocess one message, or every processed message of the agent in recorded order.
    Stops at the first LLM outage (later messages must not overtake it)."""
    result = ReprocessResult(agent_id=agent_id)
    if message_id is not None:
        ids = [message_id]
    else:
        ids, cursor = [], None
        while True:
            page = queries.list_messages(pool, agent_id, MessageFilter(limit=500, cursor=cursor))
            for item in page.items:
                if not item.processed:
                    result.skipped.append(item.message_id)
                elif item.extractor in STORED_ONLY_EXTRACTORS:
                    result.stored_only.append(item.message_id)
                else:
                    ids.append(item.message_id)
            cursor = page.next_cursor
            if not cursor:
                break
    for mid in ids:
        outcome, position = reprocess_message(pipeline, agent_id, mid)
        result.messages.append(outcome)
        result.position = max(result.position, position)
        if outcome.llm_unavailable:
            break
    return result


__all__ = ["REPROCESSED", "ReprocessOutcome", "ReprocessResult", "reprocess",
           "reprocess_message"]
