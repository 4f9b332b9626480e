"""``Memory``: the in-process API — one object that writes, projects, retrieves and audits.

It only wires parts together: the event log (``MemoryApplication``), the write pipeline, the
projectors (threads in this process, unless ``start_projectors=False`` because another process
runs them), the retriever (read models only) and the audit functions (the log only). The NATS
and HTTP services and the CLI are thin shells around it.
"""

from __future__ import annotations

import contextlib
import sys
import time
from datetime import datetime
from typing import Any

from psycopg_pool import ConnectionPool

from engramdb.domain.ports import EmbeddingProvider, LLMProvider
from engramdb.infra.advisory_locks import exclusive
from engramdb.infra.database import (
    DatabaseConfig,
    ensure_extensions,
    es_env_from_url,
    resolve_database,
)
from engramdb.infra.providers.factory import make_embedder, make_llm
from engramdb.infra.read_pool import open_read_pool, open_worker_pool
from engramdb.infra.settings import Settings, load_settings
from engramdb.projections.rebuild import RebuildReport
from engramdb.projections.runner import ProjectionSet, tracking_positions, wait_for_position
from engramdb.services.app import MemoryApplication
from engramdb.services.audit import (
    FactSnapshot,
    HistoryEntry,
    agent_history,
    fact_history,
    facts_as_of,
)
from engramdb.services.extraction import Extractor, LLMExtractor, RuleBasedExtractor
from engramdb.services.extraction.rule_based import OFFLINE_NOTICE
from engramdb.services.health import DEFAULT_MAX_LAG, HealthReport, check_health
from engramdb.services.manage_commands import dry_run_write
from engramdb.services.memory_manage import ManageMixin
from engramdb.services.metrics import LagSnapshot, Metrics
from engramdb.services.pending import (
    PendingExtraction,
    ReprocessReport,
    count_pending,
    list_pending,
    reextract_pending,
)
from engramdb.services.pre_retrieval import PreRetrieval
from engramdb.services.retrieve.models import RetrieveResult
from engramdb.services.retrieve.pipeline import Retriever
from engramdb.services.write import WriteConfig, WritePipeline, WriteRequest, WriteResult

_UNSET: Any = object()


class Memory(ManageMixin):
    """Long-term memory for agents. Open with ``Memory.open()``; close (or use ``with``)."""

    def __init__(
        self,
        *,
        database: DatabaseConfig,
        env: dict[str, str],
        embedder: EmbeddingProvider,
        llm: LLMProvider | None,
        extractor: Extractor,
        start_projectors: bool = True,
        write_config: WriteConfig | None = None,
        metrics: Metrics | None = None,
        max_lag: int = DEFAULT_MAX_LAG,
    ) -> None:
        """``metrics``: the registry ``open`` already wired into the LLM (default: a new one);
        ``max_lag``: events a projection may trail the log before ``health()`` fails."""
        self.metrics = metrics or Metrics()
        self.max_lag = max_lag
        self.database = database
        self.env = env
        self.schema = env.get("POSTGRES_SCHEMA", "public")
        self.embedder = embedder
        self.llm = llm
        self.extractor = extractor
        self.app = MemoryApplication(env)
        # the read-side pools, owned here: the read pool is lent to every reader of the read
        # models, the worker pool only to the retriever's workers (ADR-0010: no deadlock)
        self.pool: ConnectionPool = open_read_pool(database.url, self.schema, name="engramdb-read")
        self.worker_pool: ConnectionPool = open_worker_pool(database.url, self.schema)
        make = ProjectionSet.start if start_projectors else ProjectionSet
        self.projections = make(
            MemoryApplication, env, embedder,
            on_restart=lambda name: self.metrics.projector_restarts.labels(name).inc(),
        )
        for rm in self.projections.read_models:  # every series from 0: rate() works at once
            if rm.projected:
                self.metrics.projector_restarts.labels(rm.name)
        self.metrics.watch_projections(self._lag_snapshot)
        self.metrics.watch_pending(self.pending_count)
        self.pipeline = WritePipeline(
            self.app,
            extractor,
            PreRetrieval(self.pool),
            resolver_llm=llm,
            config=write_config,
        )
        self.retriever = Retriever(
            self.pool,
            embedder,
            llm=llm,
            wait_for_position=self.wait_for_projections,
            worker_pool=self.worker_pool,
        )
        self.nats_url: str | None = None  # the broker this process uses (set by ``serve``)
        self.feedback: Any = None  # retrieval notices for the jobs (``enable_feedback``)

    # ----- construction ------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        settings: Settings | None = None,
        *,
        llm: LLMProvider | None = _UNSET,
        embedder: EmbeddingProvider | None = None,
        extractor: Extractor | None = None,
        env: dict[str, str] | None = None,
        database_url: str | None = None,
        start_projectors: bool = True,
        write_config: WriteConfig | None = None,
        quiet: bool = False,
    ) -> Memory:
        """Open memory on the configured database, or on the embedded default.

        ``env`` (eventsourcing's ``POSTGRES_*`` variables) wins over ``database_url``, which
        wins over ``settings``. ``llm`` defaults to the one configured in settings (``None``
        when no key/base URL); pass ``llm=None`` to force the offline extractor.
        """
        settings = settings or load_settings()
        if env is not None:
            url = database_url or _url_from_env(env)
            database = DatabaseConfig(
                url=url, env=dict(env), schema=env.get("POSTGRES_SCHEMA", "public")
            )
        elif database_url is not None:
            database = DatabaseConfig(
                url=database_url,
                env=es_env_from_url(database_url, settings.db_schema),
                schema=settings.db_schema,
            )
        else:
            database = resolve_database(settings)
        # several processes may open one fresh schema at once: its tables are made one at a time
        with exclusive(database.url, "setup", database.schema):
            ensure_extensions(database.url, database.schema)
            metrics = Metrics()
            chosen_llm = metrics.count_llm_errors(make_llm(settings) if llm is _UNSET else llm)
            chosen_embedder = embedder or make_embedder(settings)
            if extractor is None:
                if chosen_llm is not None:
                    extractor = LLMExtractor(chosen_llm, timeout_sec=settings.llm_timeout_sec)
                else:
                    extractor = RuleBasedExtractor()
                    if not quiet:
                        print(OFFLINE_NOTICE, file=sys.stderr)
            return cls(
                database=database,
                env=database.env,
                embedder=chosen_embedder,
                llm=chosen_llm,
                extractor=extractor,
                start_projectors=start_projectors,
                write_config=write_config,
                metrics=metrics,
                max_lag=settings.ready_max_lag,
            )

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def enable_feedback(self, nats_url: str, prefix: str = "engramdb",
                        retention_days: float = 30.0) -> None:
        """Send a notice per retrieve (agent, fact ids, time) to the feedback stream, fire
        and forget; the importance jobs count them (ADR-0019). Off by default."""
        from engramdb.services.feedback import FeedbackPublisher

        self.feedback = FeedbackPublisher(nats_url, prefix, retention_days)

    def close(self) -> None:
        if self.feedback is not None:
            self.feedback.close()
        self.projections.stop()
        self.retriever.close()
        self.worker_pool.close()
        self.pool.close()
        self.app.close()
        if self.database.handle is not None:
            self.database.handle.stop()

    # ----- the three uses -----------------------------------------------------------------

    def write(
        self,
        agent_id: str,
        text: str,
        *,
        speaker: str | None = None,
        session_id: str | None = None,
        occurred_at: datetime | None = None,
        message_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        dry_run: bool = False,
    ) -> WriteResult:
        """Record one message and the memory decisions it leads to (idempotent on message_id).

        ``dry_run``: return the decisions that would be made; nothing is saved."""
        fields: dict[str, Any] = {"agent_id": agent_id, "text": text}
        for key, value in (
            ("speaker", speaker),
            ("session_id", session_id),
            ("occurred_at", occurred_at),
            ("message_id", message_id),
            ("metadata", metadata),
        ):
            if value is not None:
                fields[key] = value
        if dry_run:
            return dry_run_write(self.pipeline, WriteRequest(**fields))
        return self.pipeline.write(WriteRequest(**fields))

    def retrieve(
        self,
        agent_id: str,
        query: str,
        *,
        as_of: datetime | None = None,
        wait_for: int | None = None,
        config_overrides: dict[str, Any] | None = None,
    ) -> RetrieveResult:
        """The facts and conversations that matter for ``query``, from the read models only.

        ``wait_for`` is a ``WriteResult.position``: read-your-writes.
        """
        started = time.perf_counter()
        try:
            result = self.retriever.retrieve(
                agent_id, query, as_of=as_of, wait_for=wait_for, config_overrides=config_overrides
            )
            if self.feedback is not None and as_of is None:  # an as-of query is an audit
                self.feedback.notify(agent_id, [f.fact_id for f in result.facts])
            return result
        finally:
            self.metrics.retrieve_seconds.observe(time.perf_counter() - started)

    def wait_for_projections(self, position: int | None = None, timeout: float = 30.0) -> None:
        """Block until the read models include the event at ``position`` (default: all so far).
        A position beyond the end of the log is a ``ValueError`` naming ``wait_for`` at once
        (it could only time out: no write returned it)."""
        head = self.app.recorder.max_notification_id()  # None: the log is empty
        if position is None:
            position = head
        elif position > (head or 0):
            raise ValueError(
                f"wait_for {position} is beyond the end of the log (position {head}): "
                "pass the position a write returned"
            )
        if position is None or position <= 0:  # an empty log: nothing to wait for
            return
        if self.projections.running:
            self.projections.wait(position, timeout)
        else:
            wait_for_position(self.database.url, position, timeout, schema=self.schema)

    def health(self, max_lag: int | None = None, timeout: float = 2.0) -> HealthReport:
        """Readiness (``/readyz``): database, NATS if this process uses one, projector
        liveness (in-process) and projection lag (``max_lag`` events, default the
        ``ENGRAMDB_READY_MAX_LAG`` setting)."""
        report = check_health(
            pool=self.pool,
            schema=self.schema,
            head=self.app.recorder.max_notification_id,
            projections=self.projections,
            nats_url=self.nats_url,
            max_lag=self.max_lag if max_lag is None else max_lag,
            timeout=timeout,
        )
        if report.database.status == "up":  # informational (ADR-0014), not a readiness condition
            with contextlib.suppress(Exception):
                report.extraction_pending = self.pending_count()
        return report

    def _lag_snapshot(self) -> LagSnapshot:
        """For ``/metrics``: log head and projection positions (PostgreSQL), liveness."""
        with self.pool.connection(timeout=2.0) as conn:
            positions = tracking_positions(conn, self.schema)
        head = self.app.recorder.max_notification_id() or 0
        return LagSnapshot(head=head, positions=positions, up=self.projections.alive())

    def pending_extractions(
        self, agent_id: str | None = None, limit: int | None = None
    ) -> list[PendingExtraction]:
        """Messages an LLM outage left unextracted (ADR-0014), by agent and recorded order."""
        return list_pending(self.pool, agent_id, limit)

    def pending_count(self, agent_id: str | None = None) -> int:
        """How many messages wait for extraction (gauge-friendly: one indexed count)."""
        return count_pending(self.pool, agent_id)

    def reprocess_pending(
        self, agent_id: str | None = None, message_id: str | None = None
    ) -> ReprocessReport:
        """Re-extract pending messages now (what ``engramdb reprocess --failed`` runs)."""
        return reextract_pending(self.pipeline, self.pool, agent_id=agent_id, message_id=message_id)

    def history(self, agent_id: str, fact_id: str | None = None) -> list[HistoryEntry]:
        """How a memory came to be, from the event log."""
        if fact_id is None:
            return agent_history(self.app, agent_id)
        return fact_history(self.app, agent_id, fact_id)

    def facts_as_of(self, agent_id: str, as_of: datetime) -> list[FactSnapshot]:
        """What memory held at ``as_of``, replayed from the event log."""
        return facts_as_of(self.app, agent_id, as_of)

    def rebuild(self, projection: str | None = None, progress: bool = False) -> RebuildReport:
        """Drop and rebuild read models from the log (never calls an LLM)."""
        report: RebuildReport = self.projections.rebuild(projection, progress)
        return report


def _url_from_env(env: dict[str, str]) -> str:
    from psycopg.conninfo import make_conninfo

    return make_conninfo(
        dbname=env.get("POSTGRES_DBNAME", "postgres"),
        host=env.get("POSTGRES_HOST", "localhost"),
        port=env.get("POSTGRES_PORT", "5432"),
        user=env.get("POSTGRES_USER", "postgres"),
        password=env.get("POSTGRES_PASSWORD", ""),
    )
