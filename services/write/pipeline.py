"""The write pipeline (docs/spec.md §2): record → pre-retrieval → extraction → resolution →
reconciliation → one atomic commit.

Why it is shaped like this (ADR-0004):
- **Record first, before extraction.** The ``MessageRecord`` (id derived from agent + message
  id) is saved before any LLM call, so the message is never lost whatever fails later, and a
  redelivery collides on version 1. A record that exists but is not ``processed`` (a crash
  between the two saves) is resumed, not skipped.
- **One atomic commit of the decisions** together with ``record.complete(...)`` (extractor
  info, extraction, raw LLM output, error, LLM calls, decision counts): either the message is
  processed with all its decisions, or not at all.
- **Conflicts re-decide, they do not re-extract.** Another process may have saved events
  for the same agent meanwhile (optimistic concurrency on the aggregate). Then the cached
  aggregate is dropped, fresh state is loaded and resolution + reconciliation run again on
  the *same* extraction: no second extraction call, and LLM resolution answers are memoised.
  If the other writer processed this very message, the result is a duplicate.
- **Group commit.** Concurrent writers (ingest worker threads) hand their saves to one
  ``GroupCommit`` (``infra/group_commit.py``): whoever finds no commit in progress writes
  everything queued meanwhile in ONE transaction (records of several messages, decisions of
  several agents). The store serialises inserts with a table lock anyway, so this turns N
  waiting transactions into one without changing any message's order of steps (its record
  is still stored before its extraction). A conflict (or any error but a lost connection)
  in a shared transaction re-runs each member's save on its own, so every caller sees
  exactly the outcome a solo save would have had.
- **One writer per agent per process.** The application's aggregate cache hands out the
  shared object (no deepcopy, see ``services/memory/event_log.py``), so writes to one agent are
  serialised by a per-agent lock; different agents proceed in parallel.
- **Cited sources are verified, not trusted.** Before reconciliation, the ids the
  extractor cites for its facts are looked up (``services/write/citations.py``): only messages of
  this agent recorded before this one may join a fact's ``source_message_ids``.
- **Fail-safe.** Extractor errors give an empty extraction (the message stays recorded,
  the error is recorded); reconciliation errors fall back to plain ADDs. Only storage
  failures (database down) raise, so a caller such as the NATS ingest can retry.
- **An LLM outage is not an answer** (ADR-0014): no empty extraction; ``on_outage="defer"``
  saves ``ExtractionDeferred`` (``extraction_pending``), ``"raise"`` (ingest before its last
  attempt) raises ``ExtractionUnavailable``. A later write of the message extracts it.

Why this module is long: the stages share one message's record, aggregate and conflict loop;
each stage's logic already lives in its own module (pre-retrieval, resolution, citations…).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from eventsourcing.persistence import RecordConflictError

from engramdb.domain.aggregate import AgentMemory, MessageRecord
from engramdb.domain.corrections import note_corrections
from engramdb.domain.decisions import DecisionReport, MessageContext, apply_extraction
from engramdb.domain.directive_facts import with_directive_facts
from engramdb.domain.extraction import Extraction, ExtractionInput, ExtractorInfo
from engramdb.domain.keys import agent_aggregate_id, message_record_id
from engramdb.domain.ports import LLMProvider
from engramdb.infra.group_commit import GroupCommit
from engramdb.infra.providers.errors import is_transient
from engramdb.services.memory.event_log import EventLog
from engramdb.services.write.citations import recorded_citations
from engramdb.services.write.deferred_order import DeferredOrder, request_from_record, save_deferral
from engramdb.services.write.entity_resolution import EntityResolver, ResolutionMemo
from engramdb.services.write.messages import ConversationMessage, MessageIdConflict
from engramdb.services.write.models import (
    DecisionOut,
    ExtractionUnavailable,
    OnOutage,
    RejectedOut,
    WriteConfig,
    WriteResult,
    write_result,
)
from engramdb.services.write.not_inferred import NOT_INFERRED
from engramdb.services.write.pre_retrieval import PreRetrieval, aggregate_context

__all__ = ["DecisionOut", "ExtractionUnavailable", "RejectedOut", "WriteConfig", "WritePipeline",
           "WriteRequest", "WriteResult"]

log = logging.getLogger(__name__)

#: The pipeline accepts exactly what the bus accepts (same validation, same limits).
WriteRequest = ConversationMessage


class _Duplicate(Exception):
    """The message record is already processed (by us earlier, or by another worker)."""


class WritePipeline:
    def __init__(
        self,
        app: EventLog,
        extractor: Any,
        pre_retrieval: PreRetrieval | None = None,
        resolver_llm: LLMProvider | None = None,
        config: WriteConfig | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
        group_commit: bool = True,
    ) -> None:
        self.app = app
        self.extractor = extractor
        self.pre_retrieval = pre_retrieval
        self.config = config or WriteConfig()
        self.resolver = EntityResolver(
            resolver_llm,
            enable_llm=self.config.enable_llm_resolution,
            timeout_sec=self.config.resolution_timeout_sec,
            fuzzy_threshold=self.config.fuzzy_threshold,
            ambiguous_floor=self.config.ambiguous_floor,
        )
        self._clock = clock
        self.commits = GroupCommit(app, enabled=group_commit)
        self._locks: dict[str, threading.Lock] = {}
        self.deferred = DeferredOrder()  # this process's deferred messages, per agent
        self._locks_guard = threading.Lock()

    # ----- public ----------------------------------------------------------------------------

    def write(
        self,
        request: WriteRequest | dict[str, Any],
        *,
        recorded: MessageRecord | None = None,
        on_outage: OnOutage = "defer",
        attempts: int = 1,
    ) -> WriteResult:
        """Process one message; idempotent on (agent_id, message_id). Raises only on storage
        failure, ``MessageIdConflict`` when the id was recorded with a different text, and
        ``ExtractionUnavailable`` on an LLM outage with ``on_outage="raise"``.

        ``recorded``: the message's record as just saved by ``record_many`` (stage 1 done).
        ``attempts``: extraction attempts so far including this one (kept in the deferral).
        """
        if not isinstance(request, ConversationMessage):
            request = ConversationMessage.model_validate(request)
        started = self._clock()
        with self._agent_lock(request.agent_id):
            blocked = self.deferred.catch_up(
                request.agent_id, request.message_id, self.app.message_record,
                lambda older: self._write_locked(request_from_record(older), None, "raise"),
            )
            result = self._write_locked(request, recorded, on_outage, attempts, blocked)
            if not result.extraction_pending:
                self.deferred.forget(request.agent_id, request.message_id)
        result.duration_ms = (self._clock() - started) * 1000.0
        return result

    def agent_lock(self, agent_id: str) -> threading.Lock:
        return self._agent_lock(agent_id)

    # ----- stages ------------------------------------------------------------------------------

    def _agent_lock(self, agent_id: str) -> threading.Lock:
        with self._locks_guard:
            lock = self._locks.get(agent_id)
            if lock is None:
                lock = self._locks[agent_id] = threading.Lock()
            return lock

    def _duplicate_result(self, request: ConversationMessage) -> WriteResult:
        # The original decisions are at or before the current end of the log.
        position = self.app.recorder.max_notification_id() or 0
        return WriteResult(
            agent_id=request.agent_id, message_id=request.message_id, position=position, duplicate=True
        )

    @staticmethod
    def _new_record(request: ConversationMessage) -> MessageRecord:
        return MessageRecord(
            agent_id=request.agent_id,
            message_id=request.message_id,
            session_id=request.session_id,
            speaker=request.speaker,
            text=request.text,
            occurred_at=request.occurred_at,
            metadata=dict(request.metadata),
        )

    def record_many(self, requests: list[ConversationMessage]) -> list[MessageRecord | None]:
        """Stage 1 for a batch: save the ``Recorded`` events of several messages in ONE
        transaction (the ingest records a fetched batch before processing it).

        Returns, per request, the freshly saved record to hand to ``write(recorded=...)``,
        or None when the message was already recorded (a redelivery, a duplicate inside the
        batch): ``write`` then takes the usual path (duplicate or resume) under the agent's
        lock. A shared transaction that conflicts is retried one record at a time. Storage
        failures raise; nothing was recorded then.
        """
        if not requests:
            return []
        if not all(r.infer for r in requests):  # a stored-only turn is recorded in one commit
            inferred = iter(self.record_many([r for r in requests if r.infer]))
            return [next(inferred) if r.infer else None for r in requests]
        records = [self._new_record(r) for r in requests]
        try:
            self.commits.save(*records)
            return list(records)
        except RecordConflictError:
            self.app.forget_cached(*(r.id for r in records))
        out: list[MessageRecord | None] = []
        for request in requests:  # fresh objects: the failed save consumed the pending events
            record = self._new_record(request)
            try:
                self.commits.save(record)
                out.append(record)
            except RecordConflictError:
                self.app.forget_cached(record.id)
                out.append(None)
        return out

    def _record(self, request: ConversationMessage) -> tuple[MessageRecord, bool]:
        """Stage 1: save the ``Recorded`` event. Returns (record, resumed); raises _Duplicate."""
        record = self._new_record(request)
        try:
            self.commits.save(record)
            return record, False
        except RecordConflictError:
            self.app.forget_cached(record.id)
        existing = self.app.message_record(request.agent_id, request.message_id)
        if existing is None:  # pragma: no cover — the conflict says it exists
            raise RuntimeError("message record conflicted but cannot be loaded")
        if existing.text != request.text:
            raise MessageIdConflict(request.agent_id, request.message_id)
        if existing.processed:
            raise _Duplicate
        return existing, True

    def _store_only(self, request: ConversationMessage) -> WriteResult:
        """``infer=False`` (ADR-0049): ``Recorded`` + an empty ``Processed`` in ONE commit, so
        no crash can leave a stored-only turn pending, where a retrier would extract it."""
        existing = self.app.message_record(request.agent_id, request.message_id)
        if existing is not None:
            if existing.text != request.text:
                raise MessageIdConflict(request.agent_id, request.message_id)
            return self._duplicate_result(request)
        memory = self.app.agent_memory(request.agent_id)
        record = self._new_record(request)
        extraction, _error, _raw, _calls, info, _transient = NOT_INFERRED
        record.complete(extractor=info.model_dump(), extraction=extraction.model_dump(mode="json"),
                        raw_output=None, error=None, llm_calls=0, decisions={})
        try:
            recordings: Any = self.commits.save(memory, record)
        except RecordConflictError:  # another writer recorded it meanwhile
            self.app.forget_cached(memory.id, record.id)
            return self._duplicate_result(request)
        except BaseException:
            self.app.forget_cached(memory.id, record.id)
            raise
        position = recordings[-1].notification.id if recordings else 0
        return WriteResult(agent_id=request.agent_id, message_id=request.message_id, position=position)

    def _extraction_input(self, record: MessageRecord, memory: AgentMemory) -> ExtractionInput:
        """Stage 2: alias lookup + pre-retrieval (projections, else the aggregate)."""
        context = None
        if self.pre_retrieval is not None:
            context = self.pre_retrieval.context(record.agent_id, record.text, record.speaker, memory)
        if context is None:
            context = aggregate_context(memory, record.text, record.speaker)
        return ExtractionInput(
            agent_id=record.agent_id,
            message_id=record.message_id,
            session_id=record.session_id,
            speaker=record.speaker,
            text=record.text,
            occurred_at=record.occurred_at,
            known_entities=context.entities,
            known_facts=context.facts[: self.config.informed_extraction_topk],
            max_facts=self.config.max_facts_per_event,
        )

    def _extract(
        self, request: ExtractionInput
    ) -> tuple[Extraction, str | None, str | None, int, ExtractorInfo, bool]:
        """Stage 3: the extractor never crashes the pipeline (errors → empty extraction).
        The last item says whether the failure was an outage (``transient``)."""
        info = getattr(self.extractor, "info", None)
        if not isinstance(info, ExtractorInfo):
            info = ExtractorInfo(extractor=type(self.extractor).__name__)
        try:
            outcome = self.extractor.extract(request)
        except Exception as exc:  # noqa: BLE001 — fail-safe
            error = f"extractor raised {type(exc).__name__}: {exc}"
            return Extraction(), error, None, 0, info, is_transient(exc)
        extraction = outcome.extraction if isinstance(outcome.extraction, Extraction) else Extraction()
        transient = bool(getattr(outcome, "transient", False))
        return extraction, outcome.error, outcome.raw_output, int(outcome.llm_calls or 0), info, transient

    def _outage(
        self, request: ConversationMessage, record: MessageRecord, reason: str,
        on_outage: OnOutage, attempts: int, llm_calls: int, resumed: bool,
    ) -> WriteResult:
        """An LLM outage: raise, or save ``ExtractionDeferred`` alone (ADR-0014)."""
        if on_outage == "raise":
            raise ExtractionUnavailable(request.agent_id, request.message_id, reason)
        position = save_deferral(self.app, self.commits, record, reason, attempts)
        if position is None:  # another worker processed it meanwhile
            return self._duplicate_result(request)
        self.deferred.note(request.agent_id, request.message_id)
        return WriteResult(
            agent_id=request.agent_id, message_id=request.message_id, position=position,
            llm_calls=llm_calls, extraction_error=reason, resumed=resumed, extraction_pending=True,
        )

    def _write_locked(
        self,
        request: ConversationMessage,
        recorded: MessageRecord | None = None,
        on_outage: OnOutage = "defer",
        attempts: int = 1,
        blocked: str | None = None,
    ) -> WriteResult:
        """``blocked``: why an older deferred message blocks this one (``deferred_order``)."""
        if not request.infer and recorded is None:
            return self._store_only(request)
        if (
            recorded is not None
            and (recorded.agent_id, recorded.message_id) == (request.agent_id, request.message_id)
            and not recorded.processed
        ):
            record, resumed = recorded, False
        else:
            try:
                record, resumed = self._record(request)
            except _Duplicate:
                return self._duplicate_result(request)

        if blocked is not None and request.infer:  # infer=False decides nothing to order
            return self._outage(request, record, blocked, on_outage, attempts, 0, resumed)
        memory = self.app.agent_memory(request.agent_id)
        if request.infer:
            extraction, error, raw_output, llm_calls, info, transient = self._extract(
                self._extraction_input(record, memory))
        else:  # the turn only (ADR-0049): no extractor call, the record says so
            extraction, error, raw_output, llm_calls, info, transient = NOT_INFERRED
        if transient:
            reason = error or "LLM unavailable"
            return self._outage(request, record, reason, on_outage, attempts, llm_calls, resumed)
        ctx = MessageContext(
            agent_id=record.agent_id,
            message_id=record.message_id,
            speaker=record.speaker,
            occurred_at=record.occurred_at,
            decided_by=info.model_dump(),
            recorded_citations=recorded_citations(
                self.app, record.agent_id, record.message_id, record.created_on, extraction
            ),
        )
        memo = ResolutionMemo()
        agent_uuid = agent_aggregate_id(record.agent_id)
        record_uuid = message_record_id(record.agent_id, record.message_id)
        conflicts = 0
        while True:
            if conflicts:
                memory = self.app.agent_memory(request.agent_id)
            memory, report, notes = self._decide(memory, extraction, record, ctx, memo)
            all_errors = "; ".join(e for e in [error, *notes] if e) or None
            record.complete(
                extractor=dict(ctx.decided_by),  # the extractor's info (+ resolution model)
                extraction=extraction.model_dump(mode="json"),
                raw_output=raw_output,
                error=all_errors,
                llm_calls=llm_calls + memo.llm_calls,
                decisions=report.counts(),
            )
            try:
                recordings = self.commits.save(memory, record)
                break
            except RecordConflictError:
                self.app.forget_cached(agent_uuid, record_uuid)
                conflicts += 1
                fresh = self.app.message_record(record.agent_id, record.message_id)
                if fresh is None or fresh.processed:
                    return self._duplicate_result(request)
                if conflicts > self.config.max_conflict_retries:
                    raise
                record = fresh
                time.sleep(self.config.conflict_backoff_sec * conflicts)
            except BaseException:
                # Storage failure: the cached aggregates are ahead of the log now.
                self.app.forget_cached(agent_uuid, record_uuid)
                raise
        position = recordings[-1].notification.id if recordings else 0
        return write_result(request, position, report, llm_calls + memo.llm_calls, error, resumed, conflicts)

    def _decide(
        self,
        memory: AgentMemory,
        extraction: Extraction,
        record: MessageRecord,
        ctx: MessageContext,
        memo: ResolutionMemo,
    ) -> tuple[AgentMemory, DecisionReport, list[str]]:
        """Stages 4–5 on ``memory``; an unexpected reconciliation error falls back to ADDs.

        Returns the aggregate to save: after a failed attempt the cached object may hold
        half-applied events, so the fallback runs on a freshly loaded one.
        """
        notes: list[str] = []
        extraction = with_directive_facts(extraction, record.speaker)  # ADR-0045: facts too
        try:
            outcome = self.resolver.resolve_all(memory, extraction, record.speaker, record.text, memo)
            notes.extend(outcome.errors)
            self._note_resolution_model(ctx, memo)
            report = apply_extraction(
                memory, extraction, outcome.resolutions, ctx, self.config.max_facts_per_event
            )
            note_corrections(memory, report, record.text, record.message_id)  # ADR-0019
            return memory, report, notes
        except Exception as exc:  # noqa: BLE001 — docs/spec.md §2 fail-safe: reconciliation error → ADD
            log.exception("reconciliation failed for %s/%s", record.agent_id, record.message_id)
            notes.append(f"reconciliation failed ({type(exc).__name__}: {exc}); facts added as NEW")
        agent_uuid = agent_aggregate_id(record.agent_id)
        self.app.forget_cached(agent_uuid)
        memory = self.app.agent_memory(record.agent_id)
        plain = _as_plain_adds(extraction)
        try:
            outcome = self.resolver.resolve_all(memory, plain, record.speaker, record.text, memo)
            self._note_resolution_model(ctx, memo)
            report = apply_extraction(memory, plain, outcome.resolutions, ctx, self.config.max_facts_per_event)
            return memory, report, notes
        except Exception as exc:  # noqa: BLE001 — last resort: the message stays recorded
            notes.append(f"plain ADD fallback failed ({type(exc).__name__}: {exc}); no decisions")
            self.app.forget_cached(agent_uuid)
            return self.app.agent_memory(record.agent_id), DecisionReport(), notes


    def _note_resolution_model(self, ctx: MessageContext, memo: ResolutionMemo) -> None:
        """When the resolver asked its model about a name of this message, the decisions
        (and the record's ``Processed``) name that model too: ``decided_by.resolution_model``
        (ADR-0052). Set before any event is made; a re-decision after a conflict keeps it."""
        if memo.llm_calls and self.resolver.model_name is not None:
            ctx.decided_by.setdefault("resolution_model", self.resolver.model_name)


def _as_plain_adds(extraction: Extraction) -> Extraction:
    facts = [
        f.model_copy(update={"action": "NEW", "target_fact_id": None})
        for f in extraction.facts
        if f.action != "RETRACT"
    ]
    return Extraction(facts=facts, entities=extraction.entities, relationships=[])
