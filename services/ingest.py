"""NATS JetStream ingest: conversation messages from the bus into the write pipeline.

Delivery policy (ADR-0004):
- **Ack after save.** The subscriber uses ``faststream.AckPolicy.MANUAL`` (not the default
  REJECT_ON_ERROR, which would drop a message on the first error); a message is acked only
  once ``WritePipeline.write`` returned, i.e. its events are in PostgreSQL.
- **Poison never loops.** A payload that fails validation (not JSON, wrong types, NUL
  bytes, too long) is published to the dead-letter stream with the reason, then acked.
- **Transient failures are bounded.** If the pipeline raises (database down...), the
  message is nacked with a growing delay; after ``max_deliver`` deliveries it goes to the
  dead-letter stream with the last error as the reason, and is acked.
- **Per-agent order, agents in parallel.** A durable pull consumer fetches batches in
  stream order; one agent's messages take the agent's FIFO lock in that order and run one
  after another (in a worker thread: the pipeline is synchronous), different agents run
  concurrently up to ``max_concurrency`` threads. When one of an agent's messages fails,
  the ones queued behind it are nacked too, so a later message never overtakes an earlier
  one within a batch.
- **A fetched batch is recorded in one transaction.** Right after the turnstile, each valid
  message joins a pending list that one task saves with ``WritePipeline.record_many`` (one
  event-store transaction for all ``Recorded`` events that arrived meanwhile), *before* any
  of them is extracted; then each message is processed in its agent's chain as before. The
  decision saves of concurrent workers are coalesced by the pipeline's group commit. So a
  message costs ~1 transaction instead of 2, and "recorded before extraction" still holds.
  If the batch save fails, each message simply records itself in ``write``.
- **Duplicates are harmless.** Redeliveries (a crash before the ack) hit the pipeline's
  ``MessageRecord`` and become no-ops; publishers' ``Nats-Msg-Id`` drops re-publications.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
from faststream import AckPolicy, Context, FastStream
from faststream.nats import JStream, NatsBroker, PullSub
from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig

from engramdb.domain.aggregate import MessageRecord
from engramdb.services.messages import (
    DEFAULT_PREFIX,
    DUPLICATE_WINDOW_SEC,
    ConversationMessage,
    DeadLetter,
    InvalidMessage,
    deadletter_stream_name,
    deadletter_subject,
    messages_stream_name,
    messages_wildcard,
    parse_message,
)
from engramdb.services.write import WritePipeline, WriteResult

log = logging.getLogger(__name__)

DEFAULT_DURABLE = "engramdb-ingest"


def _header_safe(text: str, limit: int = 512) -> str:
    return " ".join(text.split())[:limit]


@dataclass
class _AgentState:
    # Future of the agent's last queued delivery; its result says whether it succeeded.
    tail: asyncio.Future[bool] | None = None


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Turnstile:
    """Lets deliveries through in consumer-sequence order (a gap gives way after a timeout).

    Gaps happen when another process shares the durable consumer or a delivery was lost;
    then waiting longer cannot help, so after ``gap_timeout`` the lowest waiting sequence
    passes anyway. The very first delivery also waits ``gap_timeout`` for its siblings.
    Each waiter sleeps on its own future and only the lowest waiting sequence is woken when
    something changes (O(1) wake-ups per delivery, not one per waiter: a fetch of 64 used to
    cost ~2000 wake-ups and task creations).
    """

    def __init__(self, gap_timeout: float = 0.02) -> None:
        self.gap_timeout = gap_timeout
        self.next: int | None = None
        self._waiting: set[int] = set()
        self._wakers: dict[int, asyncio.Future[None]] = {}

    def _may_pass(self, seq: int, expired: bool) -> bool:
        if self.next is not None and seq <= self.next:
            return True
        return expired and seq == min(self._waiting)

    def _nudge(self) -> None:
        """Wake the lowest waiter: it is the only one whose answer can have changed."""
        if self._wakers:
            _wake(self._wakers[min(self._wakers)])

    async def enter(self, seq: int | None) -> None:
        if seq is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.gap_timeout
        self._waiting.add(seq)
        try:
            while not self._may_pass(seq, loop.time() >= deadline):
                future: asyncio.Future[None] = loop.create_future()
                self._wakers[seq] = future
                remaining = deadline - loop.time()
                timer = loop.call_later(remaining, _wake, future) if remaining > 0 else None
                try:
                    await future
                finally:
                    if timer is not None:
                        timer.cancel()
                    self._wakers.pop(seq, None)
        finally:
            self._waiting.discard(seq)
            self._nudge()  # the next-lowest may be expired, or next in line

    async def leave(self, seq: int | None) -> None:
        if seq is None:
            return
        if self.next is None or seq >= self.next:
            self.next = seq + 1
        self._nudge()


class IngestService:
    """The handler's logic, separate from FastStream wiring (so it is easy to reason about)."""

    def __init__(
        self,
        broker: NatsBroker,
        pipeline: WritePipeline | None = None,
        *,
        prefix: str = DEFAULT_PREFIX,
        max_concurrency: int = 8,
        max_deliver: int = 10,
        nack_delay: float = 1.0,
        max_nack_delay: float = 30.0,
        on_result: Callable[[WriteResult], None] | None = None,
        heartbeat_sec: float = 10.0,
        batch_records: bool = True,
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
        self._agents: dict[str, _AgentState] = {}
        self.turnstile = _Turnstile()
        self._to_record: list[tuple[ConversationMessage, asyncio.Future[MessageRecord | None]]] = []
        self._record_flusher: asyncio.Task[None] | None = None
        self.stats = {"processed": 0, "duplicates": 0, "dead_lettered": 0, "nacked": 0}

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
        await self.turnstile.enter(self._consumer_seq(raw))
        try:
            try:
                message = parse_message(raw.data)
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
            await self.turnstile.leave(self._consumer_seq(raw))
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
                except Exception:  # noqa: BLE001 — each message records itself in write()
                    log.warning("recording a batch of %d messages failed; recording one by one",
                                len(batch), exc_info=True)
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
        result: WriteResult | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._heartbeat, raw)
            try:
                write = pipeline.write if recorded is None else functools.partial(pipeline.write, recorded=recorded)
                result = await anyio.to_thread.run_sync(write, message, limiter=self.limiter)
            except Exception as exc:  # noqa: BLE001 — kept out of the task group's ExceptionGroup
                failure = exc
            finally:
                tg.cancel_scope.cancel()
        if failure is not None or result is None:  # transient until proven otherwise
            reason = f"write pipeline failed: {type(failure).__name__}: {failure}"
            deliveries = self._deliveries(raw)
            if deliveries >= self.max_deliver:
                log.error("giving up on %s after %d deliveries: %s", message.message_id, deliveries, reason)
                return await self._dead_letter_and_ack(raw, reason, "processing", message.agent_id)
            log.warning("delivery %d of %s failed, will retry: %s", deliveries, message.message_id, reason)
            await self._nack(raw)
            return False
        await raw.ack()
        self.stats["duplicates" if result.duplicate else "processed"] += 1
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
        text: str | None
        try:
            text = raw.data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        body = {
            "reason": reason,
            "stage": stage,
            "agent_id": agent_id,
            "subject": raw.subject,
            **meta,
            "payload": text,
            "payload_b64": base64.b64encode(raw.data).decode("ascii"),
            "headers": dict(raw.headers or {}),
        }
        headers = {
            "Engramdb-Dead-Reason": _header_safe(reason),
            "Engramdb-Dead-Stage": stage,
            "Engramdb-Original-Subject": raw.subject,
        }
        if meta:
            headers["Nats-Msg-Id"] = f"dlq-{meta['stream']}-{meta['stream_seq']}"
        try:
            await self.broker.publish(
                json.dumps(body).encode("utf-8"),
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


def build_ingest_app(
    nats_url: str,
    pipeline: WritePipeline | None = None,
    *,
    pipeline_factory: Callable[[], WritePipeline] | None = None,
    prefix: str = DEFAULT_PREFIX,
    durable: str = DEFAULT_DURABLE,
    batch_size: int = 32,
    fetch_timeout: float = 5.0,
    max_concurrency: int = 8,
    max_deliver: int = 10,
    nack_delay: float = 1.0,
    ack_wait: float = 30.0,
    batch_records: bool = True,
    on_result: Callable[[WriteResult], None] | None = None,
    logger: logging.Logger | None = None,
) -> tuple[FastStream, NatsBroker]:
    """FastStream app + broker consuming ``<prefix>.messages.>`` with a durable pull consumer.

    Give either a ready ``pipeline`` or a ``pipeline_factory`` (called once at startup, so
    building database pools happens inside the service's lifetime). A write in progress sends
    JetStream "working" heartbeats every ``ack_wait / 3`` s, so a slow extraction is not
    redelivered while it runs.
    """
    if (pipeline is None) == (pipeline_factory is None):
        raise ValueError("give exactly one of pipeline / pipeline_factory")
    broker = NatsBroker(nats_url, logger=logger or log, max_reconnect_attempts=-1)
    service = IngestService(
        broker,
        pipeline,
        prefix=prefix,
        max_concurrency=max_concurrency,
        max_deliver=max_deliver,
        nack_delay=nack_delay,
        on_result=on_result,
        heartbeat_sec=max(0.5, ack_wait / 3),
        batch_records=batch_records,
    )
    stream = JStream(
        messages_stream_name(prefix),
        subjects=[messages_wildcard(prefix)],
        duplicate_window=DUPLICATE_WINDOW_SEC,
    )
    dead_stream = JStream(deadletter_stream_name(prefix), subjects=[deadletter_subject(prefix)])

    async def raw_decoder(msg: Any) -> Any:
        """Never JSON-decode here: validation (and dead-lettering) is the handler's job."""
        return msg.body

    @broker.subscriber(
        messages_wildcard(prefix),
        stream=stream,
        durable=durable,
        # Not batch=True: FastStream's batch mode waits to fill the batch until the timeout,
        # and short fetch timeouts race with nats-py (a message lost until ack_wait). Plain
        # pull returns partial batches at once; their handlers start in stream order.
        pull_sub=PullSub(batch_size=batch_size, timeout=fetch_timeout),
        config=ConsumerConfig(
            ack_wait=ack_wait,
            # server-side bound above ours: only reached if the process dies on a message
            max_deliver=max_deliver + 3,
            max_ack_pending=max(1000, batch_size * 4),
        ),
        ack_policy=AckPolicy.MANUAL,
        decoder=raw_decoder,
        title="engramdb ingest",
        description="Conversation messages into the write pipeline (ack after save, poison → dead letter).",
    )
    async def ingest(body: Any, message: Annotated[Any, Context("message")]) -> None:
        """Payload: a ``ConversationMessage`` JSON object (see components); validated here."""
        await service.handle(message.raw_message)

    # The dead-letter publisher only declares its stream (and documents it in AsyncAPI).
    broker.publisher(
        deadletter_subject(prefix),
        stream=dead_stream,
        schema=DeadLetter,
        title="engramdb dead letters",
        description="Messages that can never be stored, with the reason.",
    )

    async def startup() -> None:
        if service.pipeline is None and pipeline_factory is not None:
            service.pipeline = await anyio.to_thread.run_sync(pipeline_factory)

    app = FastStream(broker, on_startup=[startup])
    app.ingest_service = service  # type: ignore[attr-defined]
    return app, broker


class IngestThread:
    """Runs an ingest ``FastStream`` app on its own event loop in a daemon thread.

    For embedding the consumer in a synchronous process (``engramdb serve`` next to the HTTP
    server, the in-process facade, tests, benchmarks): ``start()`` returns once the broker
    is connected and the consumer subscribed; ``stop()`` drains and joins.
    """

    def __init__(self, app: FastStream) -> None:
        import threading

        self.app = app
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    def start(self, timeout: float = 30.0) -> IngestThread:
        import threading

        self._thread = threading.Thread(target=self._run, name="engramdb-ingest", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError("ingest app did not start in time")
        if self._error is not None:
            raise RuntimeError(f"ingest app failed to start: {self._error!r}") from self._error
        return self

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                async with self.app:
                    self._started.set()
                    await self._stop.wait()
            except BaseException as exc:  # noqa: BLE001 — reported to start()
                self._error = exc
                self._started.set()

        asyncio.run(main())

    def stop(self, timeout: float = 30.0) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> IngestThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


async def run_ingest(app: FastStream) -> None:
    """Run until SIGINT/SIGTERM (``engramdb serve`` / a dedicated ingest worker)."""
    await app.run()


def asyncapi_document(prefix: str = DEFAULT_PREFIX, nats_url: str = "nats://localhost:4222") -> dict[str, Any]:
    """The AsyncAPI 3.0 document of the ingest service, with the message schema filled in
    (the handler takes raw bytes so poison can be dead-lettered, so FastStream cannot infer it)."""
    from faststream.specification import AsyncAPI

    from engramdb.services.messages import ConversationMessage

    _app, broker = build_ingest_app(nats_url, pipeline_factory=lambda: None, prefix=prefix)  # type: ignore[arg-type,return-value]
    doc: dict[str, Any] = json.loads(
        AsyncAPI(broker, title="engramdb ingest", version="1.0.0",
                 description="Conversation messages → engramdb write pipeline (NATS JetStream).")
        .to_specification().to_json()
    )
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    message_schema = ConversationMessage.model_json_schema()
    for name in list(schemas):
        if name.startswith("engramdb ingest:"):
            schemas[name] = message_schema | {"title": "ConversationMessage"}
    doc["info"]["x-subject-scheme"] = (
        f"{prefix}.messages.<agent_token>; agent_token = first 16 chars of lower-case base32(sha256(agent_id)); "
        f"header Nats-Msg-Id = sha256(agent_id NUL message_id)[:40]; stream {messages_stream_name(prefix)} "
        f"(duplicate_window {DUPLICATE_WINDOW_SEC:g}s); dead letters on {deadletter_subject(prefix)} "
        f"in stream {deadletter_stream_name(prefix)}"
    )
    return doc


if __name__ == "__main__":  # python -m engramdb.services.ingest > docs/asyncapi.json
    print(json.dumps(asyncapi_document(), indent=2, ensure_ascii=False))
