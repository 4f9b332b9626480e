"""What a read model is, and the machinery every read model shares.

A read model is one module under ``projections/read_models/`` declaring:
- its ``Table``s (``projections.tables``): the DDL and the column lists, once;
- a view (``ReadModelView`` subclass): per-event SQL, ``@handles(EventClass)`` methods;
- a bulk fold (``BulkFold`` subclass): the same semantics in memory, for rebuild;
- its queries, if any reader needs them;
and ending with ``READ_MODEL = ReadModel(TheView, TheFold)``. ``read_models.READ_MODELS`` lists
them: schema setup, the runners and rebuild all iterate that list (docs/read-models.md).

Each view subclasses eventsourcing's ``PostgresTrackingRecorder``: its tables are created with
its tracking table, and every batch of events (one or more, from ``projections.batching``) is
applied in ONE transaction that records the tracking position of its first event
(``_insert_tracking``, which refuses a position already recorded — a replay), writes the rows
of every event in order, and moves the position to its last event. Rows and position commit
together or not at all, and a replayed event is refused, so counts such as
``reinforcement_count`` are exact. Events a view does not handle still record their position,
so ``wait(position)`` works for any notification id.

Embedders are injected by binding: ``bind_view(MemoryView, embedder)`` returns a subclass
carrying the embedder, because ``ProjectionRunner`` constructs the view from a class.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import orjson
from eventsourcing.persistence import InfrastructureFactory, Tracking
from eventsourcing.postgres import PostgresTrackingRecorder
from eventsourcing.utils import Environment
from psycopg import sql
from psycopg.types.json import Jsonb

from engramdb.domain.ports import EmbeddingProvider
from engramdb.infra.pgsql import search_path_sql, set_search_path
from engramdb.projections.batching import Batch, BatchProjection
from engramdb.projections.embeddings import fill_cache_outside_transactions, text_hash
from engramdb.projections.handlers import EventHandlers
from engramdb.projections.libpq_pipeline import insert_tracking
from engramdb.projections.tables import (
    EMBEDDING_CACHE_DDL,
    READ_MODEL_META_DDL,
    Table,
    tables_ddl,
)

_DDL_LOCK_KEY = 0x656E6772616D01  # serialises CREATE TABLE IF NOT EXISTS across processes


class EmbeddingModelMismatch(RuntimeError):
    """The read model was built with another embedding model: rebuild it with this one."""


def dumps(value: Any) -> str:
    """JSON for jsonb columns; event payloads may hold datetimes/UUIDs (as strings here)."""
    return json.dumps(value, default=str, sort_keys=True)


def _refuse(value: Any) -> Any:
    raise TypeError(type(value))


_ORJSON_PLAIN = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME
                 | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS)


def fast_dumps(value: Any) -> bytes | str:
    """``dumps``, by ``orjson`` when the value is plain JSON (dicts with string keys, lists,
    strings, 64-bit ints, floats, booleans, None, UUIDs — rendered as ``str`` renders them):
    a bulk rebuild dumps one ``decided_by`` per fact, and ``json.dumps`` was a quarter of its
    load. Anything else (datetimes, dataclasses, subclasses, other keys, big ints) goes to
    ``dumps``; the jsonb value PostgreSQL stores is the same either way (it re-parses the text
    and orders keys itself). One difference, on purpose: a NaN or infinite float becomes
    ``null`` (``json`` wrote ``NaN``, which PostgreSQL refuses: the batch failed, forever).
    ``tests/integration/test_rebuild.py`` compares the tables."""
    try:
        return orjson.dumps(value, default=_refuse, option=_ORJSON_PLAIN)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return dumps(value)


def jsonb(value: Any) -> Jsonb:
    return Jsonb(value if value is not None else {}, dumps=fast_dumps)


class ReadModelView(EventHandlers, PostgresTrackingRecorder):
    """Common machinery: DDL, search_path, embedding cache, exactly-once apply."""

    projection_name: ClassVar[str] = ""
    tables: ClassVar[tuple[Table, ...]] = ()
    embedder: ClassVar[EmbeddingProvider | None] = None

    def __init__(self, datastore: Any, *, bulk: bool = False, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        if self.embedder is None:
            raise TypeError(f"{type(self).__name__}: bind an embedder with bind_view()")
        self.bulk = bulk
        self.schema = self.datastore.schema
        self.search_path = search_path_sql(self.schema)
        statements = EMBEDDING_CACHE_DDL + READ_MODEL_META_DDL + self.table_ddl(not bulk)
        self.sql_create_statements.extend(sql.SQL(s) for s in statements)  # type: ignore[arg-type,misc]
        self._handlers = self.bound_handlers()
        self.batches = 0  # committed batches / events (tests and diagnostics)
        self.events_applied = 0

    @property
    def model(self) -> EmbeddingProvider:
        assert self.embedder is not None
        return self.embedder

    @classmethod
    def embedded_tables(cls) -> tuple[str, ...]:
        return tuple(t.name for t in cls.tables if t.embedded_text is not None)

    def table_ddl(self, vector_indexes: bool) -> list[str]:
        return tables_ddl(self.tables, self.model.dimensions, vector_indexes=vector_indexes)

    def _create_table(self, curs: Any) -> None:
        curs.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK_KEY,))
        curs.execute(self.search_path)
        super()._create_table(curs)
        self.check_model(curs)

    def check_model(self, curs: Any) -> None:
        """Refuse to mix vectors of two models (or dimensions) in one table.

        A read model without vectors records no model: switching embedder cannot break it.
        """
        embedded = self.embedded_tables()
        if not embedded:
            return
        for table in embedded:
            curs.execute(
                "SELECT format_type(atttypid, atttypmod) AS t FROM pg_attribute "
                "WHERE attrelid = to_regclass(%s) AND attname = 'embedding'",
                (f"{self.schema}.{table}",),
            )
            row = curs.fetchone()
            expected = f"vector({self.model.dimensions})"
            if row is not None and row["t"] != expected:
                raise EmbeddingModelMismatch(
                    f"{table}.embedding is {row['t']}, the embedder gives {expected}: run "
                    "`engramdb rebuild` to re-embed it from the log (nothing is lost)"
                )
        curs.execute(
            "INSERT INTO mem_read_model_meta (projection, embedding_model, dimensions) "
            "VALUES (%s, %s, %s) ON CONFLICT (projection) DO NOTHING",
            (self.projection_name, self.model.model_id, self.model.dimensions),
        )
        curs.execute(
            "SELECT embedding_model FROM mem_read_model_meta WHERE projection = %s",
            (self.projection_name,),
        )
        row = curs.fetchone()
        if row is not None and row["embedding_model"] != self.model.model_id:
            raise EmbeddingModelMismatch(
                f"the {self.projection_name} read model was embedded with "
                f"{row['embedding_model']!r}, the embedder now is {self.model.model_id!r}: run "
                f"`engramdb rebuild` to re-embed it from the log (nothing is lost), or set "
                f"ENGRAMDB_EMBEDDING_MODEL={row['embedding_model']} to keep the old one"
            )

    # ----- applying events -----------------------------------------------------------

    def texts_to_embed(self, event: Any) -> list[str]:
        return []

    def apply(self, event: Any, tracking: Tracking) -> None:
        self.apply_batch([(event, tracking)])

    def apply_batch(self, batch: Sequence[tuple[Any, Tracking]]) -> None:
        """Apply events (ascending positions) exactly once, in one transaction.

        Texts to embed are gathered first: one cache lookup, one ``embed()`` for the misses,
        one cache insert, committed on their own (a paid vector survives a failed batch).
        Rows are written in libpq pipeline mode: statements go out without waiting for each
        reply; a statement whose rows are needed (agent lookup, merge, the tracking row) runs
        on a cursor of its own (``projections.libpq_pipeline``: on the shared cursor it could be
        handed an earlier INSERT's reply). An error anywhere aborts the rest and rolls the
        transaction back.
        """
        if not batch:
            return
        steps = [(self._handlers.get(type(event)), event) for event, _ in batch]
        texts = [t for handler, event in steps if handler is not None
                 for t in self.texts_to_embed(event)]
        if texts:
            fill_cache_outside_transactions(
                self.datastore, lambda curs: curs.execute(self.search_path), self.model, texts,
                batch_size=None,
            )
        saved = self._save_state()
        try:
            with self.datastore.transaction(commit=True) as curs, curs.connection.pipeline():
                curs.execute(self.search_path)
                insert_tracking(self, curs, batch[0][1])  # refuses a replay, locks the row
                for handler, event in steps:
                    if handler is not None:
                        handler(curs, event)
                if len(batch) > 1:
                    insert_tracking(self, curs, batch[-1][1])
        except BaseException:
            self._restore_state(saved)
            raise
        self.batches += 1
        self.events_applied += len(batch)

    def _save_state(self) -> Any:
        """In-memory caches filled while applying must not outlive a rolled-back batch."""
        return None

    def _restore_state(self, saved: Any) -> None:
        return None

    def vector_params(self, text: str) -> dict[str, str]:
        return {"model_id": self.model.model_id, "text_hash": text_hash(text)}


class BulkFold(EventHandlers):
    """The view's semantics in memory, over the whole log at once (``projections.rebuild``).

    ``rows(table)`` yields tuples in ``Table.row_columns`` order, for COPY (big tables as a
    generator: the rows are streamed into COPY, never all built at once); ``texts()`` are the
    texts whose cached vectors the embedded tables need. Handlers are ``@handles`` methods
    taking the event.
    """

    def __init__(self) -> None:
        self._handlers = self.bound_handlers()

    def apply(self, event: Any) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def texts(self) -> list[str]:
        return []

    def rows(self, table: str) -> Iterable[tuple[Any, ...]]:
        raise KeyError(table)


class _ReadModelProjection(BatchProjection[ReadModelView]):
    """Hands batches of events to the view; no topic filter, so every position is tracked."""

    topics = ()

    def process_events(self, batch: Batch) -> None:
        self.view.apply_batch(batch)


@dataclass(frozen=True)
class ReadModel:
    """One entry of ``READ_MODELS``: everything schema setup, runners and rebuild need."""

    view: type[ReadModelView]
    fold: type[BulkFold]

    @property
    def name(self) -> str:
        """Projection name: tracking table ``<name>_tracking``, ``mem_read_model_meta`` key."""
        return self.view.projection_name

    @property
    def tables(self) -> tuple[Table, ...]:
        return self.view.tables

    @property
    def table_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tables)

    @property
    def projected(self) -> bool:
        """Whether any event changes it. One that handles none (patterns, until its jobs
        exist) needs no runner and no tracking table: schema setup creates its tables and
        rebuild recreates them, empty."""
        return bool(self.view.handler_names)

    def ddl(self, dimensions: int, vector_indexes: bool = True) -> list[str]:
        return tables_ddl(self.tables, dimensions, vector_indexes=vector_indexes)

    @cached_property
    def projection(self) -> type[BatchProjection[ReadModelView]]:
        """The eventsourcing ``Projection`` class the runner wants (named after the model)."""
        return type(
            f"{self.name.title()}Projection",
            (_ReadModelProjection,),
            {"name": self.name, "__module__": __name__},
        )


def bind_view(view_class: type[ReadModelView], embedder: EmbeddingProvider) -> type[ReadModelView]:
    """A subclass of ``view_class`` carrying ``embedder`` (ProjectionRunner wants a class)."""
    return type(
        f"{view_class.__name__}_{embedder.model_id}".replace("-", "_").replace(".", "_"),
        (view_class,),
        {"embedder": embedder, "__module__": view_class.__module__},
    )


def datastore_factory(name: str, env: dict[str, str]) -> Any:
    """eventsourcing's infrastructure factory for read model ``name`` (its own connections;
    ``<NAME>_``-prefixed variables override, as for the runner's view)."""
    merged = dict(os.environ)
    merged.update(env)
    return InfrastructureFactory.construct(env=Environment(name, merged))


def create_tables(datastore: Any, read_model: ReadModel, dimensions: int) -> None:
    """Schema setup of a read model that has no runner (its view would add a tracking table)."""
    with datastore.transaction(commit=True) as curs:
        curs.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK_KEY,))
        set_search_path(curs, datastore.schema)
        for statement in read_model.ddl(dimensions):
            curs.execute(statement)
