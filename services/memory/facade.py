"""``Memory``: the in-process API — one object that writes, projects, retrieves and audits.

It only wires parts together: per cell (``services/memory/cell.py``, ADR-0028) the event log
(``EventLog``), the write pipeline, the projectors (threads in this process, unless
``start_projectors=False`` because another process runs them) and the retriever (read models
only); the audit functions (the log only); and the router that sends each agent to its cell.
The NATS and HTTP services and the CLI are thin shells around it.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from engramdb.domain.ports import EmbeddingProvider, LLMProvider
from engramdb.infra.advisory_locks import exclusive
from engramdb.infra.cells import parse_cells
from engramdb.infra.database import (
    DatabaseConfig,
    ensure_extensions,
    es_env_from_url,
    resolve_database,
)
from engramdb.infra.embedded_postgres import PostgresHandle
from engramdb.infra.providers.factory import make_embedder
from engramdb.infra.providers.operations import OperationLLMs
from engramdb.infra.settings import Settings, load_settings
from engramdb.projections.rebuild import RebuildReport
from engramdb.services.extraction import Extractor
from engramdb.services.extraction.rule_based import OFFLINE_NOTICE
from engramdb.services.management.audit import agent_history, fact_history, facts_as_of
from engramdb.services.management.audit_models import FactSnapshot, HistoryEntry
from engramdb.services.management.commands import dry_run_write
from engramdb.services.management.pending import count_pending
from engramdb.services.management.retrier import retrier_holder
from engramdb.services.memory.cell import Cell, cell_databases
from engramdb.services.memory.facade_edit import EditMixin
from engramdb.services.memory.facade_flows import FlowsMixin
from engramdb.services.memory.facade_inspect import InspectMixin
from engramdb.services.memory.facade_management import ManageMixin
from engramdb.services.memory.facade_pending import PendingMixin
from engramdb.services.memory.llm_choice import LLMsMixin, choose_extractor, choose_llms
from engramdb.services.memory.router import (
    CellPipelines,
    CellRouter,
    SingleCellMixin,
    merge_health,
    merge_lag,
    merge_rebuilds,
)
from engramdb.services.observability.health import DEFAULT_MAX_LAG, HealthReport, check_health
from engramdb.services.observability.metrics import LagSnapshot, Metrics
from engramdb.services.retrieve.models import RetrieveResult
from engramdb.services.retrieve.scope import RetrieveFilter
from engramdb.services.write.pipeline import WriteConfig, WritePipeline, WriteRequest, WriteResult

_UNSET: Any = object()


class Memory(
    LLMsMixin, SingleCellMixin, ManageMixin, InspectMixin, EditMixin, FlowsMixin, PendingMixin
):
    """Long-term memory for agents. Open with ``Memory.open()``; close (or use ``with``).

    Agents live in cells (``ENGRAMDB_CELLS``, ADR-0028): every per-agent call goes to the
    agent's cell (``cell(agent_id)``), calls about all agents span every cell. With one cell
    (the default) ``app``, ``pool``, ``pipeline``... are that cell's; with several they name
    no single store and raise — use ``cell(agent_id)`` or ``cells``."""

    def __init__(
        self,
        *,
        cells: Sequence[tuple[str, DatabaseConfig]],
        embedder: EmbeddingProvider,
        llm: LLMProvider | OperationLLMs | None,
        extractor: Extractor,
        start_projectors: bool = True,
        write_config: WriteConfig | None = None,
        metrics: Metrics | None = None,
        max_lag: int = DEFAULT_MAX_LAG,
        handle: PostgresHandle | None = None,
    ) -> None:
        """``cells``: (name, database) per cell in hash order; ``metrics``: the registry
        ``open`` already wired into the LLM (default: a new one); ``max_lag``: events a
        projection may trail the log before ``health()`` fails; ``handle``: the embedded
        PostgreSQL this memory releases on close."""
        self.metrics = metrics or Metrics()
        self.max_lag = max_lag
        self.embedder = embedder
        #: each LLM operation's provider (ADR-0052); ``llm`` is the extraction one
        self.llms = llm if isinstance(llm, OperationLLMs) else OperationLLMs.same(llm)
        self.extractor = extractor
        self._handle = handle
        built: list[Cell] = []
        try:
            for name, database in cells:
                label = name if len(cells) > 1 else None
                # several processes may open one fresh schema at once: its tables are made
                # one at a time
                with exclusive(database.url, "setup", database.schema):
                    ensure_extensions(database.url, database.schema)
                    built.append(Cell(
                        name, database, embedder=embedder, llms=self.llms, extractor=extractor,
                        start_projectors=start_projectors, write_config=write_config,
                        on_restart=self._restart_counter(label),
                    ))
        except BaseException:
            for cell in built:
                cell.close()
            raise
        self.router = CellRouter(built)
        for cell in self.router.cells:  # every series from 0: rate() works at once
            for rm in cell.projections.read_models:
                if rm.projected:
                    self.metrics.projector_restarts.labels(self.router.label(cell, rm.name))
        self.metrics.watch_projections(self._lag_snapshot)
        self.metrics.watch_pending(self.pending_count)
        self.metrics.watch_webhooks(self.webhook_stats)  # ADR-0049
        self.nats_url: str | None = None  # the broker this process uses (set by ``serve``)
        self.feedback: Any = None  # retrieval notices for the jobs (``enable_feedback``)

    def _restart_counter(self, cell: str | None) -> Callable[[str], None]:
        def count(name: str) -> None:
            self.metrics.projector_restarts.labels(name if cell is None else f"{cell}/{name}").inc()
        return count

    # ----- cells -------------------------------------------------------------------------

    @property
    def cells(self) -> list[Cell]:
        """Every cell, in hash order (one without ``ENGRAMDB_CELLS``)."""
        return self.router.cells

    def cell(self, agent_id: str) -> Cell:
        """The cell holding ``agent_id`` (its log, read models, pipeline and retriever)."""
        return self.router.cell(agent_id)

    def ingest_pipeline(self) -> WritePipeline | CellPipelines:
        """What the NATS consumer writes through: the pipeline, or a router over the cells'."""
        return self.pipeline if len(self.router) == 1 else CellPipelines(self.router)

    # ----- construction ------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        settings: Settings | None = None,
        *,
        llm: LLMProvider | None = _UNSET,
        llms: Mapping[str, LLMProvider | None] | None = None,
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
        when no key/base URL), per operation (ADR-0052); ``llm=p`` is ``p`` for every
        operation, ``llm=None`` forces the offline extractor; ``llms={"rerank": q}`` gives
        some operations their own provider on top.
        ``settings.cells`` (``ENGRAMDB_CELLS``) hashes agents over several stores derived from
        that database (ADR-0028); unset, the one store is exactly that database and schema.
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
        metrics = Metrics()
        chosen = choose_llms(settings, llm, _UNSET, llms, metrics)
        chosen_embedder = embedder or make_embedder(settings)
        notice = extractor is None and chosen.get("extraction") is None and not quiet
        extractor = extractor or choose_extractor(settings, chosen)
        try:
            memory = cls(
                cells=cell_databases(database, parse_cells(settings.cells, database.schema)),
                embedder=chosen_embedder,
                llm=chosen,
                extractor=extractor,
                start_projectors=start_projectors,
                write_config=write_config,
                metrics=metrics,
                max_lag=settings.ready_max_lag,
                handle=database.handle,
            )
        except BaseException:
            if database.handle is not None:
                database.handle.stop()
            raise
        if notice:  # once the database answered: an unreachable one is the only error shown
            print(OFFLINE_NOTICE, file=sys.stderr)
        return memory

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def enable_feedback(self, nats_url: str, prefix: str = "engramdb",
                        retention_days: float = 30.0) -> None:
        """Send a notice per retrieve (agent, fact ids, time) to the feedback stream, fire
        and forget; the importance jobs count them (ADR-0019). Off by default."""
        from engramdb.services.jobs.feedback_stream import FeedbackPublisher

        self.feedback = FeedbackPublisher(nats_url, prefix, retention_days)

    def close(self) -> None:
        if self.feedback is not None:
            self.feedback.close()
        for cell in self.router.cells:
            cell.close()
        if self._handle is not None:
            self._handle.stop()

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
        infer: bool = True,
    ) -> WriteResult:
        """Record one message and the memory decisions it leads to (idempotent on message_id).

        ``dry_run``: return the decisions that would be made; nothing is saved. ``infer=False``:
        store the turn only, no extraction and no decisions (ADR-0049)."""
        fields: dict[str, Any] = {"agent_id": agent_id, "text": text, "infer": infer}
        for key, value in (
            ("speaker", speaker),
            ("session_id", session_id),
            ("occurred_at", occurred_at),
            ("message_id", message_id),
            ("metadata", metadata),
        ):
            if value is not None:
                fields[key] = value
        pipeline = self.cell(agent_id).pipeline
        if dry_run:
            return dry_run_write(pipeline, WriteRequest(**fields))
        return pipeline.write(WriteRequest(**fields))

    def retrieve(
        self,
        agent_id: str,
        query: str,
        *,
        as_of: datetime | None = None,
        wait_for: int | None = None,
        config_overrides: dict[str, Any] | None = None,
        session_id: str | Sequence[str] | None = None, metadata: Mapping[str, Any] | None = None,
    ) -> RetrieveResult:
        """The facts and conversations that matter for ``query``, from the read models only.

        ``wait_for`` is a ``WriteResult.position`` of this agent: read-your-writes.
        ``session_id`` (one or a list) / ``metadata`` (``list_facts``' filter tree): only turns
        that satisfy both and facts drawn from one, in every candidate query (ADR-0047)."""
        within = RetrieveFilter.of(session_id, metadata)
        started = time.perf_counter()
        try:
            result = self.cell(agent_id).retriever.retrieve(
                agent_id, query, as_of=as_of, wait_for=wait_for, config_overrides=config_overrides, within=within)
            if self.feedback is not None and as_of is None:  # an as-of query is an audit
                self.feedback.notify(agent_id, [f.fact_id for f in result.facts])
            return result
        finally:
            self.metrics.retrieve_seconds.observe(time.perf_counter() - started)

    def wait_for_projections(
        self, position: int | None = None, timeout: float = 30.0, *, agent_id: str | None = None
    ) -> None:
        """Block until the read models include the event at ``position`` (default: all so far).
        A position beyond the end of the log is a ``ValueError`` naming ``wait_for`` at once
        (it could only time out: no write returned it). Positions are per cell: with several
        cells a ``position`` needs the ``agent_id`` it was written for."""
        if agent_id is not None:
            self.cell(agent_id).wait_for_projections(position, timeout)
        elif position is None or len(self.router) == 1:
            for cell in self.router.cells:
                cell.wait_for_projections(position, timeout)
        else:
            raise ValueError("positions are per cell: pass the agent_id the position was written for")

    def health(self, max_lag: int | None = None, timeout: float = 2.0) -> HealthReport:
        """Readiness (``/readyz``): database, NATS if this process uses one, projector
        liveness (in-process) and projection lag (``max_lag`` events, default the
        ``ENGRAMDB_READY_MAX_LAG`` setting) — of every cell."""
        return merge_health(self.router, self.router.each(
            lambda cell: self._cell_health(cell, max_lag, timeout)))

    def _cell_health(self, cell: Cell, max_lag: int | None, timeout: float) -> HealthReport:
        report = check_health(
            pool=cell.pool,
            schema=cell.schema,
            head=cell.head,
            projections=cell.projections,
            nats_url=self.nats_url,
            max_lag=self.max_lag if max_lag is None else max_lag,
            timeout=timeout,
        )
        if report.database.status == "up":  # informational (ADR-0014), not a readiness condition
            with contextlib.suppress(Exception):
                report.extraction_pending = count_pending(cell.pool)
            with contextlib.suppress(Exception), cell.pool.connection(timeout=timeout) as conn:
                report.extraction_retrier = retrier_holder(conn, cell.schema)  # ADR-0029
        return report

    def _lag_snapshot(self) -> LagSnapshot:
        """For ``/metrics``: log head and projection positions (PostgreSQL), liveness."""
        return merge_lag(self.router, self.router.each(Cell.lag_snapshot))

    def history(self, agent_id: str, fact_id: str | None = None) -> list[HistoryEntry]:
        """How a memory came to be, from the agent's cell's event log."""
        app = self.cell(agent_id).app
        if fact_id is None:
            return agent_history(app, agent_id)
        return fact_history(app, agent_id, fact_id)

    def facts_as_of(self, agent_id: str, as_of: datetime) -> list[FactSnapshot]:
        """What memory held at ``as_of``, replayed from the agent's cell's event log."""
        return facts_as_of(self.cell(agent_id).app, agent_id, as_of)

    def rebuild(
        self, projection: str | None = None, progress: bool = False, *, cell: str | None = None
    ) -> RebuildReport:
        """Drop and rebuild read models from the log (never calls an LLM): every cell, one
        after another, or the cell named ``cell``."""
        cells = self.cells if cell is None else [self.router.named(cell)]
        return merge_rebuilds([c.rebuild(projection, progress) for c in cells])


def _url_from_env(env: dict[str, str]) -> str:
    from psycopg.conninfo import make_conninfo

    return make_conninfo(
        dbname=env.get("POSTGRES_DBNAME", "postgres"),
        host=env.get("POSTGRES_HOST", "localhost"),
        port=env.get("POSTGRES_PORT", "5432"),
        user=env.get("POSTGRES_USER", "postgres"),
        password=env.get("POSTGRES_PASSWORD", ""),
    )
