"""The ingest handler's logic (validate, order per agent, write, settle), separate from the
FastStream wiring so it is easy to reason about. The delivery policy is in the package
docstring (``engramdb.services.entrypoints.nats.ingest``)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from faststream.nats import NatsBroker
from nats.aio.msg import Msg

from engramdb.domain.aggregate import MessageRecord
from engramdb.domain.erasure import AgentErasedError
from engramdb.services.entrypoints.nats.ingest.partitions import (
    published_subject,
    subject_agent_token,
)
from engramdb.services.entrypoints.nats.ingest.turnstile import Turnstile
from engramdb.services.memory.router import CellPipelines
from engramdb.services.write.messages import (
    DEADLETTER_INLINE_MAX_BYTES,
    DEADLETTER_PREVIEW_BYTES,
    DEFAULT_PREFIX,
    ConversationMessage,
    InvalidMessage,
    MessageIdConflict,
    agent_token,
    deadletter_stream_name,
    deadletter_subject,
    message_subject,
    parse_message,
)
from engramdb.services.write.pipeline import ExtractionUnavailable, WritePipeline, WriteResult

# The package's logger name, as before the split into modules (log filters keep working).
log = logging.getLogger(__package__)


def _header_safe(text: str, limit: int = 512) -> str:
    return " ".join(text.split())[:limit]


def _inline_payload(data: bytes) -> dict[str, Any]:
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {"payload": text, "payload_b64": base64.b64encode(data).decode("ascii"), "payload_bytes": len(data),
            "by_reference": False}


def _payload_reference(data: bytes) -> dict[str, Any]:
    """The payload stays in its stream (``stream``/``stream_seq``); keep a short preview."""
    preview = data[:DEADLETTER_PREVIEW_BYTES].decode("utf-8", "replace")
    return {"payload": None, "payload_b64": None, "by_reference": True, "payload_preview": preview}


@dataclass
class _AgentState:
    # Future of the agent's last queued delivery; its result says whether it succeeded.
    tail: asyncio.Future[bool] | None = None


class IngestService:
    """The handler's logic, separate from FastStream wiring (so it is easy to reason about)."""

    def __init__(
        self,
        broker: NatsBroker,
        pipeline: WritePipeline | CellPipelines | None = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        max_concurrency: int = 8,
        max_deliver: int = 10,
        nack_delay: float = 1.0,
        max_nack_delay: float = 30.0,
        on_result: Callable[[WriteResult], None] | None = None,
        heartbeat_sec: float = 10.0,
        batch_records: bool = True,
        extraction_attempts: int = 5,
    ) -> None:
        self.broker = broker
        self.pipeline = pipeline
        self.prefix = prefix
        self.max_deliver = max_deliver
        self.nack_delay = nack_delay
        self.max_nack_delay = max_nack_delay
        self.on_result = on_result
        self.limiter = anyio.CapacityLimiter(max_concurrency)
        self.heartbeat_sec = heartbeat_sec
        self.batch_records = batch_records
        # deliveries that try extraction through an LLM outage before the message is recorded
        # as "extraction pending" and acked (ADR-0014)
        self.extraction_attempts = max(1, extraction_attempts)
        self._agents: dict[str, _AgentState] = {}
        self.turnstile = Turnstile()  # deliveries without a consumer name (core NATS, tests)
        self._turnstiles: dict[str, Turnstile] = {}  # one per consumer: sequences are per consumer
        self._to_record: list[tuple[ConversationMessage, asyncio.Future[MessageRecord | None]]] = []
        self._record_flusher: asyncio.Task[None] | None = None
        self.stats = {"processed": 0, "duplicates": 0, "dead_lettered": 0, "nacked": 0,
                      "llm_unavailable": 0, "extraction_deferred": 0}

    # ----- one message -----------------------------------------------------------------------

    async def handle(self, raw: Msg) -> None:
        """Validate, then write in the agent's queue, acking only after the save.

        FastStream runs the handlers of one fetched batch concurrently, and their start order
        is not a guarantee. So each delivery first passes a turnstile in JetStream *consumer
        sequence* order (contiguous for one consumer) and takes its place in its agent's
        chain there; then it waits for its predecessor in that chain only. One agent's
        messages are thus written in stream order, other agents' in parallel worker threads.
        If a message fails (nacked), the ones already chained behind it are nacked too, so
        none of them overtakes it.
        """
        turnstile = self._turnstile(raw)
        await turnstile.enter(self._consumer_seq(raw))
        try:
            try:
                message = parse_message(raw.data)
                expected = message_subject(message.agent_id, self.prefix)
                # stored as <prefix>.messages.<partition>.<token> (ADR-0020)
                if subject_agent_token(raw.subject, self.prefix) != agent_token(message.agent_id):
                    raise InvalidMessage(
                        f"subject {published_subject(raw.subject, self.prefix)!r} does not match agent_id {message.agent_id!r}: "
                        f"publish this agent's messages on {expected!r}"
                    )
            except InvalidMessage as exc:
                message = None
                reason = exc.reason
            if message is None:
                state, previous, mine = None, None, None
            else:
                state = self._agents.get(message.agent_id)
                if state is None:
                    state = self._agents[message.agent_id] = _AgentState()
                previous = state.tail if state.tail is not None and not state.tail.done() else None
                mine = asyncio.get_running_loop().create_future()
                state.tail = mine
        finally:
            await turnstile.leave(self._consumer_seq(raw))
        if message is None:
            await self._dead_letter_and_ack(raw, reason, "validation")
            return
        assert state is not None and mine is not None
        ok = False
        try:
            recorded = await self._prerecord(message)
            predecessor_ok = await asyncio.shield(previous) if previous is not None else True
            if not predecessor_ok:
                await self._nack(raw)  # an earlier message of this agent failed: keep order
            else:
                ok = await self._process_one(raw, message, recorded)
        finally:
            mine.set_result(ok)
            if state.tail is mine:
                self._agents.pop(message.agent_id, None)

    # ----- stage 1 for a whole fetch --------------------------------------------------------

    async def _prerecord(self, message: ConversationMessage) -> MessageRecord | None:
        """The message's record, saved together with the others waiting now (or None)."""
        # off, no pipeline yet, or a wrapper without batching: write() records each message
        if not self.batch_records or not hasattr(self.pipeline, "record_many"):
            return None
        future: asyncio.Future[MessageRecord | None] = asyncio.get_running_loop().create_future()
        self._to_record.append((message, future))
        if self._record_flusher is None:
            self._record_flusher = asyncio.create_task(self._flush_records())
        return await asyncio.shield(future)

    async def _flush_records(self) -> None:
        """Group commit of ``Recorded`` events: whatever queued while the last save ran."""
        try:
            await asyncio.sleep(0)  # let the rest of the fetch pass the turnstile
            while self._to_record:
                batch, self._to_record = self._to_record, []
                pipeline = self.pipeline
                records: list[MessageRecord | None]
                try:
                    assert pipeline is not None
                    records = await anyio.to_thread.run_sync(pipeline.record_many, [m for m, _ in batch])
                except Exception as exc:  # noqa: BLE001 — each message records itself in write()
                    erased = isinstance(exc, AgentErasedError)  # expected: no traceback (issue 28)
                    log.warning("recording a batch of %d messages failed%s; recording one by one",
                                len(batch), " (an agent in it was erased)" if erased else "",
                                exc_info=not erased)
                    records = [None] * len(batch)
                for (_, future), record in zip(batch, records, strict=True):
                    if not future.done():
                        future.set_result(record)
        finally:  # the queue is empty here unless cancelled: then they record themselves
            self._record_flusher = None
            left, self._to_record = self._to_record, []
            for _, future in left:
                if not future.done():
                    future.set_result(None)

    async def _process_one(
        self, raw: Msg, message: ConversationMessage, recorded: MessageRecord | None = None
    ) -> bool:
        """True if the message is settled (acked, possibly dead-lettered); False if nacked."""
        pipeline = self.pipeline
        if pipeline is None:  # pragma: no cover — the app's startup builds it
            await self._nack(raw)
            return False
        failure: Exception | None = None
        conflict: MessageIdConflict | None = None
        result: WriteResult | None = None
        deliveries = self._deliveries(raw)
        kwargs: dict[str, Any] = {} if recorded is None else {"recorded": recorded}
        if isinstance(pipeline, (WritePipeline, CellPipelines)):  # an LLM outage: nack, until the last attempt
            kwargs["attempts"] = deliveries
            last = min(self.extraction_attempts, self.max_deliver)  # never beyond max_deliver
            kwargs["on_outage"] = "defer" if deliveries >= last else "raise"
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._heartbeat, raw)
            try:
                write = functools.partial(pipeline.write, **kwargs)
                result = await anyio.to_thread.run_sync(write, message, limiter=self.limiter)
            except MessageIdConflict as exc:  # permanent: the original stays, this one is told
                conflict = exc
            except Exception as exc:  # noqa: BLE001 — kept out of the task group's ExceptionGroup
                failure = exc
            finally:
                tg.cancel_scope.cancel()
        if conflict is not None:
            return await self._dead_letter_and_ack(raw, str(conflict), "validation", message.agent_id)
        if isinstance(failure, AgentErasedError):  # ADR-0018: keep no copy (no dead letter)
            log.warning("dropped message %s: its agent was erased", message.message_id)
            await raw.ack()
            return True
        if isinstance(failure, ExtractionUnavailable):  # recorded; extraction retried later
            self.stats["llm_unavailable"] += 1
            log.warning("delivery %d of %s: LLM unavailable, will retry: %s",
                        deliveries, message.message_id, failure.reason)
            await self._nack(raw)
            return False
        if failure is not None or result is None:  # transient until proven otherwise
            reason = f"write pipeline failed: {type(failure).__name__}: {failure}"
            if deliveries >= self.max_deliver:
                log.error("giving up on %s after %d deliveries: %s", message.message_id, deliveries, reason)
                return await self._dead_letter_and_ack(raw, reason, "processing", message.agent_id)
            log.warning("delivery %d of %s failed, will retry: %s", deliveries, message.message_id, reason)
            await self._nack(raw)
            return False
        await raw.ack()
        self.stats["duplicates" if result.duplicate else "processed"] += 1
        if result.extraction_pending:
            self.stats["extraction_deferred"] += 1
        if self.on_result is not None:
            try:
                self.on_result(result)
            except Exception:  # noqa: BLE001 — an observer must not break ingestion
                log.exception("on_result callback failed")
        return True

    async def _heartbeat(self, raw: Msg) -> None:
        """Tell JetStream we are still working, so a slow extraction is not redelivered."""
        while True:
            await anyio.sleep(self.heartbeat_sec)
            with contextlib.suppress(Exception):
                await raw.in_progress()

    def _turnstile(self, raw: Msg) -> Turnstile:
        try:
            consumer = str(raw.metadata.consumer)
        except Exception:  # noqa: BLE001 — not a JetStream delivery
            return self.turnstile
        turnstile = self._turnstiles.get(consumer)
        if turnstile is None:
            turnstile = self._turnstiles[consumer] = Turnstile()
        return turnstile

    def forget_consumer(self, partition: int) -> None:
        """A partition was (re)taken: its consumer may be new, its sequences start at 1."""
        for name in [n for n in self._turnstiles if n.endswith(f"-p{partition}")]:
            del self._turnstiles[name]

    # ----- settlement --------------------------------------------------------------------------

    @staticmethod
    def _consumer_seq(raw: Msg) -> int | None:
        try:
            return int(raw.metadata.sequence.consumer)
        except Exception:  # noqa: BLE001 — not a JetStream delivery
            return None

    @staticmethod
    def _deliveries(raw: Msg) -> int:
        try:
            return int(raw.metadata.num_delivered)
        except Exception:  # noqa: BLE001 — core NATS message without JetStream metadata
            return 1

    async def _nack(self, raw: Msg) -> None:
        delay = min(self.max_nack_delay, self.nack_delay * (2 ** (self._deliveries(raw) - 1)))
        self.stats["nacked"] += 1
        try:
            await raw.nak(delay=delay)
        except Exception:  # noqa: BLE001 — unacked anyway: the server redelivers after ack_wait
            log.exception("nak failed")

    async def _dead_letter_and_ack(
        self, raw: Msg, reason: str, stage: str, agent_id: str | None = None
    ) -> bool:
        meta: dict[str, Any] = {}
        with contextlib.suppress(Exception):  # a core NATS message has no JetStream metadata
            meta = {"stream": raw.metadata.stream, "stream_seq": raw.metadata.sequence.stream,
                    "deliveries": raw.metadata.num_delivered}
        subject = published_subject(raw.subject, self.prefix)
        body = {"reason": reason, "stage": stage, "agent_id": agent_id, "subject": subject, **meta,
                **_inline_payload(raw.data), "headers": dict(raw.headers or {})}
        encoded = json.dumps(body).encode("utf-8")
        if len(encoded) > DEADLETTER_INLINE_MAX_BYTES and meta:  # too big to copy: refer to it
            body.update(_payload_reference(raw.data))
            encoded = json.dumps(body).encode("utf-8")
        headers = {
            "Engramdb-Dead-Reason": _header_safe(reason),
            "Engramdb-Dead-Stage": stage,
            "Engramdb-Original-Subject": subject,
        }
        if meta:
            headers["Nats-Msg-Id"] = f"dlq-{meta['stream']}-{meta['stream_seq']}"
        try:
            await self.broker.publish(
                encoded,
                deadletter_subject(self.prefix),
                headers=headers,
                stream=deadletter_stream_name(self.prefix),
                timeout=5.0,
            )
        except Exception:  # noqa: BLE001 — keep the message: retry the dead-lettering later
            log.exception("dead-letter publish failed; nacking instead")
            await self._nack(raw)
            return False
        self.stats["dead_lettered"] += 1
        log.warning("dead-lettered message (%s): %s", stage, reason)
        await raw.ack()
        return True
