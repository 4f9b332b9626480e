"""``engramdb serve``: the long-running services, one process or split by role.

- ``all``: everything in one process on the embedded default (ingest consumer, projectors,
  NATS request/reply retrieve, HTTP API);
- ``ingest``: the JetStream consumer and write pipeline only (scale out by agent partition);
- ``projector``: the read-model projectors only;
- ``jobs``: the sleep-time jobs on their schedule (ADR-0019; ``all`` runs them too);
- ``retrieve``: HTTP API + NATS retrieve responder (read replicas; waits on tracking tables
  for read-your-writes).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import uvicorn

from engramdb.infra.api_keys import ApiKeyConfigError, KeyRing
from engramdb.infra.database import resolve_nats
from engramdb.infra.key_reload import watch_keyring
from engramdb.infra.nats_auth import redact_url
from engramdb.infra.settings import Settings, load_settings
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.entrypoints.http.auth import allowed_hosts, check_bind, secure
from engramdb.services.entrypoints.nats.changes import ChangePublisher
from engramdb.services.entrypoints.nats.ingest import IngestThread, build_ingest_app
from engramdb.services.entrypoints.nats.manage import register_manage
from engramdb.services.entrypoints.nats.retrieve import create_retrieve_broker, retrieve_subject
from engramdb.services.entrypoints.nats.webhooks import WebhookDispatcher
from engramdb.services.entrypoints.serve.broker_stop import stop_broker
from engramdb.services.entrypoints.serve.shutdown import ShutdownRequest, SignalFreeServer
from engramdb.services.entrypoints.serve.startup_heap import settle
from engramdb.services.entrypoints.serve.watchdog import EmbeddedWatchdog, embedded_servers
from engramdb.services.jobs.schedule import start_jobs
from engramdb.services.management.retrier import ExtractionRetrier
from engramdb.services.memory.facade import Memory

ROLES = ("all", "ingest", "projector", "retrieve", "jobs")
log = logging.getLogger("engramdb.server")


def run_server(role: str = "all", settings: Settings | None = None) -> None:
    if role not in ROLES:
        raise SystemExit(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = settings or load_settings()
    if role in ("all", "retrieve"):  # fail before starting anything
        _keyring(settings)
    # SIGTERM/SIGINT only set a flag: every block below unwinds (drain, release), exit 0
    with ShutdownRequest().installed() as shutdown:
        _run(role, settings, shutdown)


def _run(role: str, settings: Settings, shutdown: ShutdownRequest) -> None:
    projectors = role in ("all", "projector")
    extracts = role in ("all", "ingest")  # only then is the offline-extractor notice news
    with Memory.open(settings, start_projectors=projectors, quiet=not extracts) as memory:
        nats_url = resolve_nats(settings) if role != "projector" else None
        memory.nats_url = nats_url  # so /readyz checks the broker too (and erase reaches it)
        memory.subject_prefix = settings.subject_prefix  # type: ignore[attr-defined]
        if role in ("all", "retrieve") and nats_url is not None:  # ADR-0019
            memory.enable_feedback(nats_url, settings.subject_prefix,
                                   settings.feedback_retention_days)
        watchdog = EmbeddedWatchdog(  # restarts a dead embedded server (issue 28)
            settings.data_dir, embedded_servers(settings, role), memory.metrics.registry
        ).start()
        jobs = start_jobs(memory, settings, nats_url) if role in ("all", "jobs") else None
        ingest = None
        retriers: list[ExtractionRetrier] = []
        if role in ("all", "ingest") and nats_url is not None:
            app, _broker = build_ingest_app(
                nats_url,
                memory.ingest_pipeline(),  # each message into its agent's cell (ADR-0028)
                metrics=memory.metrics,
                prefix=settings.subject_prefix,
                extraction_attempts=settings.extraction_attempts,
                ack_wait=settings.ingest_ack_wait_sec,
                **ingest_scaling(memory, settings),
            )
            ingest = IngestThread(app).start()
            log.info("ingest consuming %s.messages.* on %s", settings.subject_prefix, redact_url(nats_url))
        if role in ("all", "ingest") and memory.llm is not None:  # nothing to wait for offline
            retriers = [ExtractionRetrier(  # one process retries per cell at a time (ADR-0029)
                cell.pipeline, cell.pool, settings.extraction_retry_interval_sec,
                leases=cell.database.url, lease_scope=cell.schema,
            ).start() for cell in memory.cells]
        changes = [ChangePublisher(cell.app, nats_url, settings.subject_prefix).start()
                   for cell in memory.cells] if (  # ADR-0049
            settings.change_stream and role in ("all", "ingest") and nats_url is not None) else []
        dispatcher = WebhookDispatcher(  # follows the registry: hooks added or deleted live
            lambda: memory.list_webhooks(with_secrets=True), nats_url or "",
            settings.subject_prefix, on_stats=memory.record_webhook_stats,
        ).start() if changes else None
        log.info("start-up objects frozen out of garbage collection: %d", settle())  # ADR-0041
        try:
            if shutdown.requested:
                pass  # stopped while starting up
            elif role in ("all", "retrieve") and nats_url is not None:
                asyncio.run(_serve_retrieve(memory, nats_url, settings, shutdown))
            else:
                shutdown.wait()
        finally:
            watchdog.stop()
            for retrier in retriers:
                retrier.stop()
            for publisher in changes:
                publisher.stop()
            if dispatcher is not None:
                dispatcher.stop()
            if jobs is not None:
                jobs.stop()
            if ingest is not None:
                ingest.stop()  # drains: in-flight messages are written and acked first
        log.info("stopped; releasing the database and embedded servers")


async def _serve_retrieve(
    memory: Memory, nats_url: str, settings: Settings, shutdown: ShutdownRequest
) -> None:
    subject = retrieve_subject(settings.subject_prefix)
    broker = create_retrieve_broker(memory, nats_url, subject)
    register_manage(broker, memory, f"{settings.subject_prefix}.manage")  # <prefix>.manage.<op>, beside retrieve
    await broker.start()
    log.info("retrieve answering on NATS subject %s", subject)
    app = secure(
        create_app(memory, max_body_bytes=settings.http_max_body_bytes),
        _keyring(settings),
        allowed_hosts(settings.http_host, settings.http_allowed_hosts),
    )
    config = uvicorn.Config(
        app, host=settings.http_host, port=settings.http_port, log_level="info"
    )
    server = SignalFreeServer(config)
    shutdown.watch(server)
    try:
        await server.serve()
    finally:
        await stop_broker(broker, "retrieve")  # exit 0 with NATS down too (issue 28)


def ingest_scaling(memory: Memory, settings: Settings) -> dict[str, Any]:
    """Partitions, stream replicas, and the database whose advisory locks spread the
    partitions over every process consuming this memory (ADR-0020): the first cell's, so all
    processes agree however many cells there are (ADR-0028)."""
    first = memory.cells[0]
    return {"partitions": settings.ingest_partitions, "replicas": settings.nats_stream_replicas,
            "leases": first.database.url, "lease_scope": first.schema}


def _keyring(settings: Settings) -> KeyRing:
    """The HTTP key ring, following its key file (issue 28); exits with the reason if it is
    unusable or the bind is unsafe."""
    try:
        ring = watch_keyring(settings.api_keys, settings.data_dir)
    except ApiKeyConfigError as exc:
        raise SystemExit(str(exc)) from None
    check_bind(settings.http_host, ring)
    return ring
