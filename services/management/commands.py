"""Managing memory by events: delete a fact, forget an agent, and a dry-run write.

Why deletes are events (ADR-0016): the log is the source of truth and is never edited.
Deleting a fact is the domain's own retraction (``FactRetracted``, reason ``user request``,
``decided_by`` naming the actor and the surface); "forget everything about agent A" is ONE
``Forgotten`` event that ends every active fact. History and as-of still show what memory
knew before; the read models and retrieval stop showing it (facts inactive, their source
turns hidden — see ``mem_hidden_messages`` / ``mem_forgotten``).

Both commands go through the agent aggregate under the write pipeline's per-agent lock and
its group commit, exactly as a message's decisions do, so they serialise with concurrent
writes; a conflict with another process reloads and re-decides.

A dry-run write runs the pipeline's stages (pre-retrieval, extraction, resolution,
reconciliation) on a private copy of the aggregate and an unsaved record: the decisions come
back, nothing is stored (no event, no record, no cache change).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from eventsourcing.persistence import RecordConflictError

from engramdb.domain.aggregate import AgentMemory
from engramdb.domain.decisions import DecisionReport, MessageContext, apply_extraction
from engramdb.domain.keys import agent_aggregate_id
from engramdb.services.management.models import (
    DeleteResult,
    ForgetResult,
    NotActiveError,
    NotFoundError,
)
from engramdb.services.write.citations import recorded_citations
from engramdb.services.write.entity_resolution import ResolutionMemo
from engramdb.services.write.messages import ConversationMessage
from engramdb.services.write.models import WriteResult, write_result
from engramdb.services.write.not_inferred import NOT_INFERRED
from engramdb.services.write.pipeline import WritePipeline

USER_REQUEST = "user request"


def _decided_by(actor: str, via: str) -> dict[str, Any]:
    return {"by": "user", "actor": actor, "via": via}


def _command(
    pipeline: WritePipeline, agent_id: str, act: Callable[[AgentMemory], Any]
) -> tuple[int, Any]:
    """Run ``act`` on the agent's aggregate and save its events; retry on a conflict."""
    app = pipeline.app
    agent_uuid = agent_aggregate_id(agent_id)
    with pipeline.agent_lock(agent_id):
        for attempt in range(pipeline.config.max_conflict_retries + 1):
            if agent_uuid not in app.repository:
                raise NotFoundError(f"agent {agent_id!r} has no memory")
            memory = app.agent_memory(agent_id)
            outcome = act(memory)
            try:
                recordings = pipeline.commits.save(memory)
            except RecordConflictError:
                app.forget_cached(agent_uuid)
                time.sleep(pipeline.config.conflict_backoff_sec * (attempt + 1))
                continue
            except BaseException:
                app.forget_cached(agent_uuid)
                raise
            return (recordings[-1].notification.id if recordings else 0), outcome
    raise RecordConflictError(f"agent {agent_id!r} kept changing; try again")


def delete_fact(
    pipeline: WritePipeline, agent_id: str, fact_id: str, actor: str, via: str
) -> DeleteResult:
    """Retract ``fact_id`` at the user's request. ``NotFoundError`` if the agent never had
    it, ``NotActiveError`` if it already ended (superseded, retracted, forgotten)."""

    def act(memory: AgentMemory) -> None:
        if not memory.is_active(fact_id):
            if any(
                getattr(e, "fact_id", None) == fact_id for e in pipeline.app.agent_events(agent_id)
            ):
                raise NotActiveError(
                    f"fact {fact_id!r} of agent {agent_id!r} is no longer active "
                    "(see its history); nothing to delete"
                )
            raise NotFoundError(f"agent {agent_id!r} has no fact {fact_id!r}")
        memory.retract_fact(
            fact_id, None, datetime.now(UTC), USER_REQUEST, _decided_by(actor, via)
        )

    position, _ = _command(pipeline, agent_id, act)
    return DeleteResult(agent_id=agent_id, fact_id=fact_id, position=position)


def forget_agent(pipeline: WritePipeline, agent_id: str, actor: str, via: str) -> ForgetResult:
    """End all of the agent's active facts and hide its turns so far, in one event."""

    def act(memory: AgentMemory) -> int:
        ended = len(memory.active_facts)
        memory.forget(datetime.now(UTC), USER_REQUEST, _decided_by(actor, via))
        return ended

    position, ended = _command(pipeline, agent_id, act)
    return ForgetResult(agent_id=agent_id, facts_ended=ended, position=position)


def dry_run_write(pipeline: WritePipeline, request: ConversationMessage) -> WriteResult:
    """The decisions ``pipeline.write(request)`` would make now; nothing is saved.

    Runs the pipeline's own stages (its private methods, so a dry run can never drift from
    a real write) on a deep copy of the aggregate, taken under the agent's lock.
    """
    app = pipeline.app
    started = time.perf_counter()
    existing = app.message_record(request.agent_id, request.message_id)
    if existing is not None and existing.processed:
        result = pipeline._duplicate_result(request)
        result.dry_run = True
        return result
    record = pipeline._new_record(request)  # never saved
    with pipeline.agent_lock(request.agent_id):
        memory = copy.deepcopy(app.agent_memory(request.agent_id))
    extraction, error, _raw, llm_calls, info, transient = pipeline._extract(
        pipeline._extraction_input(record, memory)
    ) if request.infer else NOT_INFERRED
    ctx = MessageContext(
        agent_id=record.agent_id,
        message_id=record.message_id,
        speaker=record.speaker,
        occurred_at=record.occurred_at,
        decided_by=info.model_dump(),
        recorded_citations=recorded_citations(
            app, record.agent_id, record.message_id, record.created_on, extraction
        ),
    )
    memo = ResolutionMemo()
    notes: list[str] = []
    try:
        outcome = pipeline.resolver.resolve_all(
            memory, extraction, record.speaker, record.text, memo
        )
        notes.extend(outcome.errors)
        report = apply_extraction(
            memory, extraction, outcome.resolutions, ctx, pipeline.config.max_facts_per_event
        )
    except Exception as exc:  # noqa: BLE001 — report it; a real write would fall back to ADDs
        notes.append(f"reconciliation failed ({type(exc).__name__}: {exc})")
        report = DecisionReport()
    errors = "; ".join(e for e in [error, *notes] if e) or None
    result = write_result(request, 0, report, llm_calls + memo.llm_calls, errors, False, 0)
    result.dry_run = True
    result.extraction_pending = transient  # an LLM outage: a real write would defer (ADR-0014)
    result.duration_ms = (time.perf_counter() - started) * 1000.0
    return result
