"""FastStream wiring of the ingest: the broker, the partition consumers (``partitions``,
ADR-0020), the dead-letter stream, and the pipeline built at startup. The handler's logic is
``IngestService``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio
from faststream import FastStream
from faststream.nats import JStream, NatsBroker

from engramdb.infra.nats_auth import nats_servers
from engramdb.services.entrypoints.nats.ingest.partitions import (
    DEFAULT_PARTITIONS,
    PartitionConsumers,
)
from engramdb.services.entrypoints.nats.ingest.service import IngestService
from engramdb.services.memory.router import CellPipelines
from engramdb.services.observability.metrics import Metrics
from engramdb.services.write.messages import (
    DEFAULT_PREFIX,
    DeadLetter,
    deadletter_max_age,
    deadletter_stream_name,
    deadletter_subject,
)
from engramdb.services.write.pipeline import WritePipeline, WriteResult

# The package's logger name, as before the split into modules (log filters keep working).
log = logging.getLogger(__package__)

DEFAULT_DURABLE = "engramdb-ingest"


class QuietFetchTimeouts(logging.Filter):
    """Drop FastStream's report of an idle pull fetch timing out.

    nats-py's ``fetch`` sometimes raises the builtin ``TimeoutError`` instead of its own
    ``nats.errors.TimeoutError``, which FastStream's pull loop suppresses; FastStream's task
    supervisor then logs a traceback and restarts the loop — on an idle consumer every ~20 s
    (issue 10). The restart is what we want; the traceback is noise. Any other exception of
    the loop is still logged.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("callback for Task-") and message.endswith(" is being executed..."):
            return False  # the supervisor's note that precedes every restart
        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, TimeoutError) and "raised an exception, retrying" in message)


def _quiet(logger: logging.Logger) -> logging.Logger:
    if not any(isinstance(f, QuietFetchTimeouts) for f in logger.filters):
        logger.addFilter(QuietFetchTimeouts())
    return logger


def build_ingest_app(
    nats_url: str,
    pipeline: WritePipeline | CellPipelines | None = None,
    *,
    pipeline_factory: Callable[[], WritePipeline | CellPipelines] | None = None,
    prefix: str = DEFAULT_PREFIX,
    durable: str = DEFAULT_DURABLE,
    batch_size: int = 32,
    fetch_timeout: float = 5.0,
    max_concurrency: int = 8,
    max_deliver: int = 10,
    nack_delay: float = 1.0,
    ack_wait: float = 30.0,
    batch_records: bool = True,
    extraction_attempts: int = 5,
    on_result: Callable[[WriteResult], None] | None = None,
    logger: logging.Logger | None = None,
    metrics: Metrics | None = None,
    partitions: int = DEFAULT_PARTITIONS,
    replicas: int = 1,
    leases: str | None = None,
    lease_scope: str = "public",
) -> tuple[FastStream, NatsBroker]:
    """FastStream app + broker consuming ``<prefix>.messages.*``: ``partitions`` durable pull
    consumers (``<durable>-p<n>``), each run by one process at a time — the holder of its
    advisory lock in the database at ``leases`` (a libpq conninfo; None: this process runs
    them all). ``replicas``: JetStream replicas of the streams (a clustered NATS).

    Give either a ready ``pipeline`` or a ``pipeline_factory`` (called once at startup, so
    building database pools happens inside the service's lifetime). A write in progress sends
    JetStream "working" heartbeats every ``ack_wait / 3`` s, so a slow extraction is not
    redelivered while it runs. ``metrics`` (a ``Memory``'s) gets the ingest lag and tallies.
    ``extraction_attempts``: deliveries that try extraction through an LLM outage (nack with
    backoff between them) before the message is recorded as "extraction pending" and acked
    (ADR-0014).
    """
    if (pipeline is None) == (pipeline_factory is None):
        raise ValueError("give exactly one of pipeline / pipeline_factory")
    broker = NatsBroker(nats_servers(nats_url), logger=_quiet(logger or log), max_reconnect_attempts=-1)
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
        extraction_attempts=extraction_attempts,
    )
    consumers = PartitionConsumers(
        lambda: broker._connection,  # noqa: SLF001 - the broker's connected nats-py client
        _metered(service, metrics),
        prefix=prefix,
        durable=durable,
        partitions=partitions,
        replicas=replicas,
        leases=leases,
        lease_scope=lease_scope,
        consumer_config=_consumer_config(ack_wait, max_deliver, batch_size),
        batch_size=batch_size,
        fetch_timeout=min(fetch_timeout, 1.0),  # also how long a released partition takes
        on_take=service.forget_consumer,
    )
    _declare_dead_letters(broker, prefix, replicas)

    async def startup() -> None:
        if service.pipeline is None and pipeline_factory is not None:
            service.pipeline = await anyio.to_thread.run_sync(pipeline_factory)

    if metrics is not None:
        metrics.watch_ingest(service.stats)
    app = FastStream(broker, on_startup=[startup], after_startup=[consumers.start],
                     on_shutdown=[consumers.stop])
    app.ingest_service = service  # type: ignore[attr-defined]
    app.ingest_consumers = consumers  # type: ignore[attr-defined]
    return app, broker


def _metered(service: IngestService, metrics: Metrics | None) -> Callable[[Any], Any]:
    """The consumers' handler: the service's, counted in ``metrics`` when there are any."""
    if metrics is None:
        return service.handle
    registry = metrics

    async def handle(raw: Any) -> None:
        registry.ingest_received(raw)
        try:
            await service.handle(raw)
        finally:
            registry.ingest_settled()

    return handle


def _consumer_config(ack_wait: float, max_deliver: int, batch_size: int) -> dict[str, Any]:
    return {
        "ack_wait": ack_wait,
        # server-side bound above ours: only reached if the process dies on a message
        "max_deliver": max_deliver + 3,
        "max_ack_pending": max(1000, batch_size * 4),
    }


def _declare_dead_letters(broker: NatsBroker, prefix: str, replicas: int) -> None:
    """The dead-letter publisher only declares its stream (and documents it in AsyncAPI)."""
    dead_stream = JStream(deadletter_stream_name(prefix), subjects=[deadletter_subject(prefix)],
                          num_replicas=replicas, max_age=deadletter_max_age())  # issue 28
    broker.publisher(
        deadletter_subject(prefix),
        stream=dead_stream,
        schema=DeadLetter,
        title="engramdb dead letters",
        description="Messages that can never be stored, with the reason.",
    )


async def run_ingest(app: FastStream) -> None:
    """Run until SIGINT/SIGTERM (``engramdb serve`` / a dedicated ingest worker)."""
    await app.run()
