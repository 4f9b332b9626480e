"""``Cell``: one event store and everything that hangs off it (ADR-0028).

A cell is what ``Memory`` was before cells: one eventsourcing application (the log of its
agents), the read pools, the projectors (elected per cell: their advisory-lock namespace names
the cell's schema, and separate databases never share advisory locks), the write pipeline and
the retriever. ``Memory`` owns one ``Cell`` per entry of ``ENGRAMDB_CELLS`` and routes each
agent to its cell (``infra/cells.py``); with one cell it is exactly the old single store.

Log positions (``WriteResult.position``, ``wait_for``) are positions in ONE cell's log: they
are only meaningful together with the agent (or cell) they came from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from psycopg_pool import ConnectionPool

from engramdb.domain.ports import EmbeddingProvider
from engramdb.infra.cells import CellSpec
from engramdb.infra.database import DatabaseConfig, es_env_from_url
from engramdb.infra.providers.operations import OperationLLMs
from engramdb.infra.read_pool import open_read_pool, open_worker_pool
from engramdb.projections.rebuild import RebuildReport
from engramdb.projections.runner import ProjectionSet, tracking_positions, wait_for_position
from engramdb.services.memory.event_log import EventLog
from engramdb.services.observability.metrics import LagSnapshot
from engramdb.services.retrieve.pipeline import Retriever
from engramdb.services.write.pipeline import WriteConfig, WritePipeline
from engramdb.services.write.pre_retrieval import PreRetrieval


class Cell:
    """One cell's log, read models, projectors, write pipeline and retriever."""

    def __init__(
        self,
        name: str,
        database: DatabaseConfig,
        *,
        embedder: EmbeddingProvider,
        llms: OperationLLMs,
        extractor: Any,
        start_projectors: bool = True,
        write_config: WriteConfig | None = None,
        on_restart: Callable[[str], None] | None = None,
    ) -> None:
        self.name = name
        self.database = database
        self.env = database.env
        self.schema = database.env.get("POSTGRES_SCHEMA", "public")
        self.embedder = embedder
        self.llms = llms  # resolution and rerank use theirs (ADR-0052)
        self.app = EventLog(self.env)
        # the read-side pools, owned here: the read pool is lent to every reader of the read
        # models, the worker pool only to the retriever's workers (ADR-0010: no deadlock)
        self.pool: ConnectionPool = open_read_pool(database.url, self.schema, name="engramdb-read")
        self.worker_pool: ConnectionPool = open_worker_pool(database.url, self.schema)
        make = ProjectionSet.start if start_projectors else ProjectionSet
        self.projections = make(EventLog, self.env, embedder, on_restart=on_restart)
        self.pipeline = WritePipeline(
            self.app, extractor, PreRetrieval(self.pool), resolver_llm=llms.get("resolution"),
            config=write_config
        )
        self.retriever = Retriever(
            self.pool, embedder, llm=llms.get("rerank"), wait_for_position=self.wait_for_projections,
            worker_pool=self.worker_pool,
        )

    def head(self) -> int | None:
        """The last notification id of this cell's log (None: empty)."""
        return self.app.recorder.max_notification_id()

    def wait_for_projections(self, position: int | None = None, timeout: float = 30.0) -> None:
        """Block until this cell's read models include ``position`` (default: all so far).
        A position beyond the end of the log is a ``ValueError`` naming ``wait_for`` at once
        (it could only time out: no write returned it)."""
        head = self.head()
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

    def lag_snapshot(self) -> LagSnapshot:
        """For ``/metrics``: log head and projection positions (PostgreSQL), liveness."""
        with self.pool.connection(timeout=2.0) as conn:
            positions = tracking_positions(conn, self.schema)
        return LagSnapshot(head=self.head() or 0, positions=positions, up=self.projections.alive())

    def rebuild(self, projection: str | None = None, progress: bool = False) -> RebuildReport:
        report: RebuildReport = self.projections.rebuild(projection, progress)
        return report

    def close(self) -> None:
        self.projections.stop()
        self.retriever.close()
        self.worker_pool.close()
        self.pool.close()
        self.app.close()


def cell_databases(base: DatabaseConfig, specs: Sequence[CellSpec]) -> list[tuple[str, DatabaseConfig]]:
    """(name, database) of each cell: a cell without a URL is a schema of ``base``'s database
    (same connection settings); one cell in ``base``'s own schema is ``base`` itself, so a
    deployment without ``ENGRAMDB_CELLS`` opens exactly what it opened before."""
    out: list[tuple[str, DatabaseConfig]] = []
    for spec in specs:
        if spec.url is None and spec.schema == base.schema:
            out.append((spec.name, dataclasses.replace(base, handle=None)))
        elif spec.url is None:
            env = {k: v for k, v in base.env.items() if k != "POSTGRES_SCHEMA"}
            if spec.schema != "public":
                env["POSTGRES_SCHEMA"] = spec.schema
            out.append((spec.name, DatabaseConfig(url=base.url, env=env, schema=spec.schema)))
        else:
            env = es_env_from_url(spec.url, spec.schema)
            out.append((spec.name, DatabaseConfig(url=spec.url, env=env, schema=spec.schema)))
    return out
