"""Ingest across processes (ADR-0020): the message stream is split into partitions by agent,
each partition has its own durable pull consumer, and each partition is consumed by exactly one
process at a time — the holder of the partition's PostgreSQL advisory lock.

Why partitions: per-agent order needs one consumer per agent at a time; one consumer for all
agents is one process. The stream itself partitions (NATS subject transform, server >= 2.10):
a turn published on ``<prefix>.messages.<agent-token>`` — the subject publishers and their
per-agent permissions already use — is stored as ``<prefix>.messages.<p>.<agent-token>`` with
``p = partition(N, agent-token)`` computed by the server (a deterministic hash), so publishers
change nothing. Consumer ``engramdb-ingest-p<p>`` filters ``<prefix>.messages.<p>.*``.

Spreading: every ingest process holds a *member* lease; ``pg_locks`` counts the members; a
process holds at most ``ceil(N / members)`` partitions, releasing the surplus (after its
in-flight messages settle) and taking free ones every ``rebalance_every`` seconds. A process
that dies (``kill -9``) loses its session and thus its leases; the survivors take its
partitions at their next rebalance, after a grace of two lease pings (a holder cut off from the
database, not dead, notices at its next ping and stops consuming first).

Takeover keeps per-agent order: a dead holder leaves delivered-but-unacked messages, which
JetStream would redeliver only after ``ack_wait`` — *after* newer messages of the same agent.
So the new holder recreates the partition's consumer starting at its ack floor + 1: every
unacked message comes again, in stream order; the already-acked ones above the floor come
again too and are no-ops (the pipeline's ``MessageRecord`` makes a redelivery a duplicate).
One agent's acks are in order (a message waits for its predecessor's), so the acked messages
of an agent are always a prefix of its messages and order is kept.

Upgrading a stream made before partitions: ``declare_stream`` adds the transform (new turns are
partitioned from then on); turns stored earlier keep their unpartitioned subject and the old
durable consumer (named ``durable``). One process (the holder of the ``LEGACY`` lease) narrows
that consumer to ``<prefix>.messages.*``, drains it, deletes it, and only then consumes
partitions; a single-process upgrade thus keeps every agent's order across the upgrade.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import nats.errors
from nats.aio.msg import Msg
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    StreamConfig,
    SubjectTransform,
)
from nats.js.errors import BadRequestError, NotFoundError

from engramdb.infra.advisory_locks import AdvisoryLocks, namespace
from engramdb.services.write.messages import (
    DUPLICATE_WINDOW_SEC,
    messages_max_age,
    messages_stream_name,
    messages_wildcard,
)

log = logging.getLogger(__package__)

DEFAULT_PARTITIONS = 8
REBALANCE_EVERY = 1.0  # seconds between lease checks / rebalances
LEGACY = 1_000_000  # lease object of the pre-partition consumer's drain


def partition_durable(durable: str, partition: int) -> str:
    return f"{durable}-p{partition}"


def partition_filter(prefix: str, partition: int) -> str:
    return f"{prefix}.messages.{partition}.*"


def messages_stream_config(prefix: str, partitions: int | None = None,
                           replicas: int | None = None) -> StreamConfig:
    """The message stream: agent subjects, partitioned on arrival by the server (defaults:
    ``ENGRAMDB_INGEST_PARTITIONS``, ``ENGRAMDB_NATS_STREAM_REPLICAS``)."""
    if partitions is None or replicas is None:
        from engramdb.infra.settings import load_settings

        settings = load_settings()
        partitions = settings.ingest_partitions if partitions is None else partitions
        replicas = settings.nats_stream_replicas if replicas is None else replicas
    return StreamConfig(
        name=messages_stream_name(prefix),
        subjects=[messages_wildcard(prefix)],
        duplicate_window=DUPLICATE_WINDOW_SEC,
        max_age=messages_max_age(),  # raw turns in clear: bounded (ADR-0018)
        num_replicas=replicas,
        subject_transform=SubjectTransform(
            src=f"{prefix}.messages.*",
            dest=f"{prefix}.messages.{{{{partition({partitions},1)}}}}.{{{{wildcard(1)}}}}",
        ),
    )


def subject_agent_token(subject: str, prefix: str) -> str | None:
    """The agent token of a stored subject: ``<prefix>.messages.<p>.<token>`` (partitioned)
    or ``<prefix>.messages.<token>`` (stored before ADR-0020); None for anything else."""
    head = f"{prefix}.messages."
    if not subject.startswith(head):
        return None
    rest = subject[len(head):].split(".")
    if len(rest) == 1:
        return rest[0]
    if len(rest) == 2 and rest[0].isdigit():
        return rest[1]
    return None


def published_subject(subject: str, prefix: str) -> str:
    """The subject a stored message was published on (the partition token removed): what a
    dead letter names, so replaying it publishes where publishers do."""
    token = subject_agent_token(subject, prefix)
    return f"{prefix}.messages.{token}" if token is not None else subject


async def declare_stream(js: Any, config: StreamConfig) -> None:
    """Create the stream, or bring an existing one to ``config`` (adds the transform)."""
    try:
        await js.add_stream(config)
    except BadRequestError as exc:
        if "already in use" not in str(exc.description or exc):
            raise
        await js.update_stream(config)


@dataclass
class _Partition:
    number: int
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    inflight: set[asyncio.Task[None]] = field(default_factory=set)
    task: asyncio.Task[None] | None = None


class PartitionConsumers:
    """Consumes the partitions this process holds; rebalances with the other processes."""

    def __init__(
        self,
        connection: Callable[[], Any],
        handle: Callable[[Msg], Coroutine[Any, Any, None]],
        *,
        prefix: str,
        durable: str,
        partitions: int = DEFAULT_PARTITIONS,
        replicas: int = 1,
        leases: str | None = None,
        lease_scope: str = "public",
        consumer_config: dict[str, Any] | None = None,
        batch_size: int = 32,
        fetch_timeout: float = 1.0,
        rebalance_every: float = REBALANCE_EVERY,
        on_take: Callable[[int], None] | None = None,
    ) -> None:
        """``connection()``: the connected nats-py client; ``handle(msg)`` settles one
        delivery; ``leases``: libpq conninfo of the database whose advisory locks elect the
        consumers (None: this process consumes every partition, no election)."""
        self.connection = connection
        self.handle = handle
        self.prefix = prefix
        self.durable = durable
        self.count = partitions
        self.replicas = replicas
        self.stream = messages_stream_name(prefix)
        self.consumer_config = dict(consumer_config or {})
        self.batch_size = batch_size
        self.fetch_timeout = fetch_timeout
        self.max_inflight = max(batch_size * 4, 64)
        self.rebalance_every = rebalance_every
        self.on_take = on_take
        self.locks = AdvisoryLocks(leases, "engramdb-ingest-leases") if leases else None
        self.partition_ns = namespace("ingest-partition", lease_scope, prefix)
        self.member_ns = namespace("ingest-member", lease_scope, prefix)
        self.member = random.randrange(1, 2**31 - 1)
        first = self.member % partitions
        self.order = [(first + i) % partitions for i in range(partitions)]
        self.held: dict[int, _Partition] = {}
        self._js: Any = None
        self._loop_task: asyncio.Task[None] | None = None
        self._rebalanced = False  # the first rebalance takes partitions without a grace

    # ----- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        self._js = self.connection().jetstream()
        await declare_stream(self._js, messages_stream_config(self.prefix, self.count, self.replicas))
        if self.locks is not None:
            await asyncio.to_thread(self.locks.try_acquire, self.member_ns, self.member)
        try:
            legacy = await self._js.consumer_info(self.stream, self.durable)
        except NotFoundError:
            legacy = None
        if legacy is None:
            await self.rebalance()
        self._loop_task = asyncio.create_task(self._rebalance_forever(legacy))

    async def stop(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        await asyncio.gather(*(self._release(p) for p in list(self.held)), return_exceptions=True)
        if self.locks is not None:
            await asyncio.to_thread(self.locks.close)

    # ----- rebalancing ------------------------------------------------------------------

    async def _drain_legacy(self, info: Any) -> None:
        """Consume what the pre-partition consumer still holds, then delete it (see above)."""
        locks = self.locks
        if locks is not None and not await asyncio.to_thread(locks.try_acquire, self.partition_ns, LEGACY):
            return  # another process drains it
        try:
            config = info.config
            config.filter_subject = f"{self.prefix}.messages.*"  # unpartitioned subjects only
            await self._js.add_consumer(self.stream, config)  # same durable: an update
            part = _Partition(LEGACY)
            sub = await self._js.pull_subscribe_bind(durable=self.durable, stream=self.stream)
            part.task = asyncio.create_task(self._consume(part, sub))
            log.warning("draining the pre-partition ingest consumer %s (ADR-0020)", self.durable)
            while True:
                await asyncio.sleep(0.5)
                now = await self._js.consumer_info(self.stream, self.durable)
                if not now.num_pending and not now.num_ack_pending:
                    break
            part.stopping.set()
            await part.task
            await self._js.delete_consumer(self.stream, self.durable)
            log.warning("drained and deleted the pre-partition ingest consumer %s", self.durable)
        finally:
            if locks is not None:
                await asyncio.to_thread(locks.release, self.partition_ns, LEGACY)

    async def _rebalance_forever(self, legacy: Any = None) -> None:
        if legacy is not None:
            try:
                await self._drain_legacy(legacy)
            except Exception as exc:  # noqa: BLE001 - partitions must run regardless
                log.error("draining the pre-partition consumer failed (%s: %s)", type(exc).__name__, exc)
            await self.rebalance()
        while True:
            await asyncio.sleep(self.rebalance_every)
            try:
                await self.rebalance()
            except Exception as exc:  # noqa: BLE001 - database or NATS away: try again later
                log.warning("ingest rebalance failed (%s: %s); retrying", type(exc).__name__, exc)

    async def rebalance(self) -> None:
        """Drop lost leases, release the surplus, take free partitions up to the fair share."""
        locks = self.locks
        if locks is None:
            target = self.count
        else:
            held = await asyncio.to_thread(locks.check)
            for p in [p for p in self.held if (self.partition_ns, p) not in held]:
                log.warning("ingest partition %d: lease lost; stopping its consumer", p)
                await self._release(p, lost=True)
            if (self.member_ns, self.member) not in held:
                await asyncio.to_thread(locks.try_acquire, self.member_ns, self.member)
            members = max(1, await asyncio.to_thread(locks.holders, self.member_ns))
            target = math.ceil(self.count / members)
        surplus = sorted(self.held)[target:]
        if surplus:
            await asyncio.gather(*(self._release(p) for p in surplus))
        taken: list[int] = []
        for p in self.order:
            if len(self.held) + len(taken) >= target:
                break
            if p in self.held:
                continue
            if locks is None or await asyncio.to_thread(locks.try_acquire, self.partition_ns, p):
                taken.append(p)
        if taken and locks is not None and self._rebalanced:
            # a takeover: a holder cut off from the database (not dead) notices at its next
            # lease ping and stops; wait for that before consuming beside it
            await asyncio.sleep(2 * locks.ping_every)
        self._rebalanced = True
        for i, p in enumerate(taken):
            try:
                await self._take(p)
            except BaseException:
                if locks is not None:
                    for q in taken[i:]:
                        await asyncio.to_thread(locks.release, self.partition_ns, q)
                raise

    async def _take(self, p: int) -> None:
        await self._prepare_consumer(p)
        part = _Partition(p)
        sub = await self._js.pull_subscribe_bind(
            durable=partition_durable(self.durable, p), stream=self.stream
        )
        part.task = asyncio.create_task(self._consume(part, sub))
        self.held[p] = part
        log.info("ingest partition %d: consuming", p)
        if self.on_take is not None:
            self.on_take(p)

    async def _release(self, p: int, lost: bool = False) -> None:
        part = self.held.pop(p, None)
        if part is None:
            return
        part.stopping.set()
        if part.task is not None:
            if lost:
                part.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await part.task
        if self.locks is not None and not lost:
            await asyncio.to_thread(self.locks.release, self.partition_ns, p)
        log.info("ingest partition %d: released", p)

    async def _prepare_consumer(self, p: int) -> None:
        """Create the partition's consumer; after a dead holder, restart it at its ack floor."""
        name = partition_durable(self.durable, p)
        config = ConsumerConfig(
            durable_name=name,
            filter_subject=partition_filter(self.prefix, p),
            ack_policy=AckPolicy.EXPLICIT,
            deliver_policy=DeliverPolicy.ALL,
            **self.consumer_config,
        )
        try:
            info = await self._js.consumer_info(self.stream, name)
        except NotFoundError:
            info = None
        if info is not None and info.num_ack_pending:
            start = (info.ack_floor.stream_seq or 0) + 1
            log.warning("ingest partition %d: %d unacked deliveries of a previous holder; "
                        "redelivering from stream sequence %d in order", p, info.num_ack_pending, start)
            await self._js.delete_consumer(self.stream, name)
            config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = start
            info = None
        if info is None:
            await self._js.add_consumer(self.stream, config)

    # ----- consuming --------------------------------------------------------------------

    async def _consume(self, part: _Partition, sub: Any) -> None:
        try:
            while not part.stopping.is_set():
                if len(part.inflight) >= self.max_inflight:
                    await asyncio.wait(part.inflight, return_when=asyncio.FIRST_COMPLETED)
                    continue
                try:
                    msgs = await sub.fetch(self.batch_size, timeout=self.fetch_timeout)
                except (nats.errors.TimeoutError, TimeoutError):
                    continue
                except Exception as exc:  # noqa: BLE001 - NATS reconnecting, a node down...
                    log.debug("ingest partition %d: fetch failed: %s", part.number, exc)
                    await asyncio.sleep(0.2)
                    continue
                for msg in msgs:
                    task = asyncio.create_task(self.handle(msg))
                    part.inflight.add(task)
                    task.add_done_callback(self._settled(part))
        finally:
            if part.inflight:  # let what was fetched settle (ack/nak) before letting go
                await asyncio.gather(*part.inflight, return_exceptions=True)
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    @staticmethod
    def _settled(part: _Partition) -> Callable[[asyncio.Task[None]], None]:
        def done(task: asyncio.Task[None]) -> None:
            part.inflight.discard(task)
            if not task.cancelled() and task.exception() is not None:
                log.error("ingest handler failed", exc_info=task.exception())
        return done
