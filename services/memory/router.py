"""The router over cells (ADR-0028): agent id → ``Cell``, and answers that span cells.

``Memory`` and the services ask ``CellRouter.cell(agent_id)`` (the hash is in
``infra/cells.py``); the few operations that are about every agent — list agents, health,
metrics, rebuild, pending counts, jobs — run per cell and are merged here. With one cell every
merge is the identity, so a deployment without ``ENGRAMDB_CELLS`` behaves exactly as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from psycopg_pool import ConnectionPool

from engramdb.infra.cells import cell_index
from engramdb.infra.database import DatabaseConfig
from engramdb.projections.rebuild import RebuildReport
from engramdb.projections.runner import ProjectionSet
from engramdb.services.management.models import AgentItem, Page, encode_cursor
from engramdb.services.memory.cell import Cell
from engramdb.services.memory.event_log import EventLog
from engramdb.services.observability.health import HealthReport
from engramdb.services.observability.metrics import LagSnapshot
from engramdb.services.retrieve.pipeline import Retriever
from engramdb.services.write.messages import ConversationMessage
from engramdb.services.write.pipeline import WritePipeline

T = TypeVar("T")


class CellRouter:
    """The cells of one memory, in hash order."""

    def __init__(self, cells: Sequence[Cell]) -> None:
        if not cells:
            raise ValueError("a memory needs at least one cell")
        self.cells = list(cells)

    def __len__(self) -> int:
        return len(self.cells)

    def index(self, agent_id: str) -> int:
        return cell_index(agent_id, len(self.cells))

    def cell(self, agent_id: str) -> Cell:
        """The cell that holds ``agent_id``'s events and read models."""
        return self.cells[self.index(agent_id)]

    def named(self, name: str) -> Cell:
        for cell in self.cells:
            if cell.name == name:
                return cell
        raise ValueError(f"no cell named {name!r} (cells: {', '.join(c.name for c in self.cells)})")

    def each(self, fn: Callable[[Cell], T]) -> list[T]:
        return [fn(cell) for cell in self.cells]

    def label(self, cell: Cell, name: str) -> str:
        """A per-cell key for merged reports: ``name`` alone with one cell (unchanged output),
        ``<cell>/<name>`` with several."""
        return name if len(self.cells) == 1 else f"{cell.name}/{name}"


class CellPipelines:
    """What the NATS ingest consumer writes through: each message goes to its agent's cell's
    write pipeline (same ``write`` / ``record_many`` signatures as ``WritePipeline``)."""

    def __init__(self, router: CellRouter) -> None:
        self.router = router

    def pipeline(self, agent_id: str) -> WritePipeline:
        return self.router.cell(agent_id).pipeline

    def write(self, request: Any, **kwargs: Any) -> Any:
        agent_id = request.agent_id if isinstance(request, ConversationMessage) else request["agent_id"]
        return self.pipeline(agent_id).write(request, **kwargs)

    def record_many(self, requests: list[ConversationMessage]) -> list[Any]:
        """Group commit per cell, results in the order given."""
        by_cell: dict[int, list[int]] = {}
        for i, request in enumerate(requests):
            by_cell.setdefault(self.router.index(request.agent_id), []).append(i)
        out: list[Any] = [None] * len(requests)
        for index, positions in by_cell.items():
            records = self.router.cells[index].pipeline.record_many([requests[i] for i in positions])
            for i, record in zip(positions, records, strict=True):
                out[i] = record
        return out


def merge_agent_pages(pages: Sequence[Page[AgentItem]], limit: int) -> Page[AgentItem]:
    """One keyset page (by ``agent_id``) from each cell's page after the same cursor."""
    if len(pages) == 1:
        return pages[0]
    items = sorted((item for page in pages for item in page.items), key=lambda a: a.agent_id)
    more = len(items) > limit or any(page.next_cursor for page in pages)
    items = items[:limit]
    cursor = encode_cursor(items[-1].agent_id) if more and items else None
    return Page[AgentItem](items=items, next_cursor=cursor)


def merge_health(router: CellRouter, reports: Sequence[HealthReport]) -> HealthReport:
    """All cells' readiness in one report: ready only if every cell is; projections keyed
    ``<cell>/<projection>`` and reasons prefixed by the cell when there are several."""
    if len(reports) == 1:
        return reports[0]
    first = reports[0]
    reasons: list[str] = []
    projections = {}
    for cell, report in zip(router.cells, reports, strict=True):
        reasons.extend(f"cell {cell.name}: {reason}" for reason in report.reasons)
        for name, proj in report.projections.items():
            projections[router.label(cell, name)] = proj
    down = next((r.database for r in reports if r.database.status != "up"), first.database)
    heads = [r.head for r in reports]
    pending = [r.extraction_pending for r in reports]
    return HealthReport(
        ok=not reasons, reasons=reasons, database=down, nats=first.nats,
        head=None if None in heads else sum(h or 0 for h in heads), max_lag=first.max_lag,
        projections=projections,
        extraction_pending=None if None in pending else sum(p or 0 for p in pending),
        extraction_retrier="; ".join(f"cell {cell.name}: {r.extraction_retrier}" for cell, r
                                     in zip(router.cells, reports, strict=True)
                                     if r.extraction_retrier) or None,  # ADR-0029
    )


def merge_lag(router: CellRouter, snapshots: Sequence[LagSnapshot]) -> LagSnapshot:
    """For ``/metrics``: lag is per log, so with several cells each projection's position is
    summed so that ``head - position`` is the sum of the cells' lags."""
    if len(snapshots) == 1:
        return snapshots[0]
    head = sum(s.head for s in snapshots)
    positions: dict[str, int | None] = {}
    up: dict[str, bool] = {}
    for snap in snapshots:
        for name, position in snap.positions.items():
            positions[name] = (positions.get(name) or 0) + (position or 0)
        for name, alive in snap.up.items():
            up[name] = up.get(name, True) and alive
    return LagSnapshot(head=head, positions=positions, up=up)


def merge_rebuilds(reports: Sequence[RebuildReport]) -> RebuildReport:
    """One report for a rebuild of every cell (cells are rebuilt one after another)."""
    if len(reports) == 1:
        return reports[0]
    seconds = sum(r.seconds for r in reports)
    events = sum(r.events for r in reports)
    rows: dict[str, int] = {}
    for report in reports:
        for table, count in report.rows.items():
            rows[table] = rows.get(table, 0) + count
    # model_copy: fields a later RebuildReport gains keep the first cell's value
    return reports[0].model_copy(update={
        "events": events, "position": None, "seconds": seconds,
        "events_per_sec": events / seconds if seconds > 0 else 0.0,
        "embed_calls": sum(r.embed_calls for r in reports),
        "texts_embedded": sum(r.texts_embedded for r in reports), "rows": rows,
        "read_seconds": sum(r.read_seconds for r in reports),
        "embed_seconds": sum(r.embed_seconds for r in reports),
        "write_seconds": sum(r.write_seconds for r in reports),
        "index_seconds": sum(r.index_seconds for r in reports),
        **{field: sum(getattr(r, field) for r in reports) for field in (  # ADR-0027
            "load_seconds", "key_index_seconds", "catch_up_events", "swap_seconds",
            "blocked_seconds", "fold_load_seconds")},  # ADR-0036
    })


class SingleCellMixin:
    """``Memory``'s attributes from before cells (``app``, ``pool``, ``pipeline``...): the one
    cell's; with several cells they name no single store, so they raise and say what to use."""

    router: CellRouter

    def _single(self, what: str) -> Cell:
        if len(self.router) != 1:
            raise AttributeError(
                f"memory.{what} names one cell's store, and this memory has {len(self.router)} "
                f"cells (ENGRAMDB_CELLS): use memory.cell(agent_id).{what} or memory.cells"
            )
        return self.router.cells[0]

    @property
    def app(self) -> EventLog:
        return self._single("app").app

    @property
    def pool(self) -> ConnectionPool:
        return self._single("pool").pool

    @property
    def worker_pool(self) -> ConnectionPool:
        return self._single("worker_pool").worker_pool

    @property
    def pipeline(self) -> WritePipeline:
        return self._single("pipeline").pipeline

    @property
    def retriever(self) -> Retriever:
        return self._single("retriever").retriever

    @property
    def projections(self) -> ProjectionSet:
        return self._single("projections").projections

    @property
    def database(self) -> DatabaseConfig:
        return self._single("database").database

    @property
    def env(self) -> dict[str, str]:
        return self._single("env").env

    @property
    def schema(self) -> str:
        return self._single("schema").schema
