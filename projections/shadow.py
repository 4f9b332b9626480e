"""Build a read model beside the live one: a private *shadow schema*, loaded by binary COPY,
indexed after the load, then swapped in by ``projections.swap`` (ADR-0027).

Why a schema and not ``<table>_shadow`` names: the read models' DDL is written against
unqualified names (tables, index names, generated columns' functions); a schema first on the
search path takes that DDL unchanged, and ``ALTER TABLE … SET SCHEMA`` moves a table with its
indexes and constraints under their own names — after the swap the catalog is exactly what the
incremental projector would have created. The search path while building is
``shadow, live, public``: tables resolve to the shadow, the embedding cache, the model metadata
and the search functions (kept in the live schema so generated columns never depend on an
object that is dropped with the shadow) resolve to the live schema, extensions to ``public``.

Order of work, each for speed: tables without keys or indexes; rows COPYed in binary with
``FREEZE`` (the tables were created in the same transaction); then the primary key, the
secondary indexes and the HNSW index in a second transaction with generous
``maintenance_work_mem`` and parallel maintenance workers (``ANALYZE`` before them).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from engramdb.infra.pgsql import set_search_path
from engramdb.projections.bulk_copy import (
    column_oids,
    copy_statement,
    format_rows,
    register_flat_arrays,
    register_raw_vectors,
    send_blocks,
)
from engramdb.projections.read_model import _DDL_LOCK_KEY, ReadModel
from engramdb.projections.tables import EMBEDDING_CACHE_DDL, READ_MODEL_META_DDL

MAINTENANCE_WORK_MEM = "512MB"  # the 100k x 384-d HNSW graph fits; 1GB built slower here (4/4 runs)
PARALLEL_WORKERS = 2
MIGRATION_ROW = "__migration__"  # eventsourcing's single-row tracking table marker row


def shadow_schema(schema: str, projection: str) -> str:
    """The shadow schema of ``projection`` in ``schema`` (stable: a crashed rebuild's is found
    and dropped by the next one)."""
    digest = hashlib.sha256(f"{schema}\0{projection}".encode()).hexdigest()[:16]
    return f"engramdb_rebuild_{digest}"


def shadow_search_path(shadow: str, live: str) -> sql.Composed:
    return sql.SQL("SET LOCAL search_path TO {}, {}, public").format(
        sql.Identifier(shadow), sql.Identifier(live))


def tracking_ddl(schema: str, table: str) -> sql.Composed:
    """eventsourcing's single-row tracking table (``PostgresTrackingRecorder``), same DDL."""
    return sql.SQL(
        "CREATE TABLE {}.{} (application_name text, notification_id bigint, "
        "PRIMARY KEY (application_name)) WITH (autovacuum_enabled = true, "
        "autovacuum_vacuum_threshold = 100000000, autovacuum_vacuum_scale_factor = 0.5, "
        "autovacuum_analyze_threshold = 1000, autovacuum_analyze_scale_factor = 0.01)"
    ).format(sql.Identifier(schema), sql.Identifier(table))


@dataclass
class Prepared:
    """One table's rows of one group, formatted for COPY (``ShadowLoad.prepare``)."""

    table: str
    statement: sql.Composed
    blocks: list[bytes]
    rows: int


@dataclass
class ShadowBuild:
    schema: str
    rows: dict[str, int] = field(default_factory=dict)
    load_seconds: float = 0.0  # create + COPY + ANALYZE
    copy_seconds: float = 0.0  # of which the COPYs: rows formatted + sent (``ShadowLoad.load``)
    key_index_seconds: float = 0.0  # primary keys, btree and GIN indexes
    index_seconds: float = 0.0  # HNSW


class ShadowLoad:
    """A shadow schema being loaded: ``load`` may be called many times (once per group of
    agents, ADR-0032) inside one transaction — the tables were created in it, so every COPY
    is ``FREEZE`` — then ``finish`` commits, analyzes and builds keys and indexes."""

    def __init__(self, conninfo: str, live: str, rm: ReadModel, model_id: str,
                 dimensions: int, application_name: str, position: int | None) -> None:
        self.rm, self.model_id = rm, model_id
        self.shadow = shadow_schema(live, rm.name)
        self.live = live
        self.out = ShadowBuild(self.shadow, rows={t.name: 0 for t in rm.tables})
        self.copies: dict[str, tuple[sql.Composed, list[int]]] = {}  # statement, column oids
        self.prepare_seconds = 0.0  # formatting rows (the folding thread)
        self.send_seconds = 0.0  # sending them (the loader thread, ``fold_and_load``)
        started = time.perf_counter()
        self.conn: Any = psycopg.connect(conninfo)
        self.cache: Any = psycopg.connect(conninfo, autocommit=True)
        try:
            self._create(dimensions, application_name, position)
        except BaseException:
            self.close()
            raise
        self.out.load_seconds += time.perf_counter() - started

    def _create(self, dimensions: int, application_name: str, position: int | None) -> None:
        conn, cache, rm, live, shadow = self.conn, self.cache, self.rm, self.live, self.shadow
        register_raw_vectors(conn)
        register_flat_arrays(conn)
        register_raw_vectors(cache)
        cache.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(live)))
        # end the implicit transaction the type lookups opened: the blocks below must commit
        # (and release the DDL lock) now, not when the load commits — the other read models'
        # shadows are created while this one's load transaction stays open
        conn.commit()
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK_KEY,))
            set_search_path(conn, live)
            functions = dict.fromkeys(f for t in rm.tables for f in t.functions)
            for statement in [*EMBEDDING_CACHE_DDL, *READ_MODEL_META_DDL, *functions]:
                conn.execute(statement)
        with conn.transaction():
            for old in (shadow, f"{shadow}_old"):  # a crashed rebuild's
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(old)))
        # the load's transaction: open until ``finish`` (tables created in it: COPY FREEZE)
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(shadow)))
        conn.execute(shadow_search_path(shadow, live))
        for table in rm.tables:
            conn.execute(table.create_sql(dimensions, primary_key=False))
            copy, columns = copy_statement(shadow, table, freeze=True)
            self.copies[table.name] = (copy, column_oids(conn, shadow, table.name, columns))
        if rm.projected:
            tracking = f"{rm.name}_tracking"
            conn.execute(tracking_ddl(shadow, tracking))
            marks = [(MIGRATION_ROW, 1)]
            if position is not None:
                marks.append((application_name, position))
            for name, pos in marks:
                conn.execute(sql.SQL("INSERT INTO {}.{} VALUES (%s, %s)").format(
                    sql.Identifier(shadow), sql.Identifier(tracking)), (name, pos))

    def load(self, rows: Callable[[str], Iterable[tuple[Any, ...]]]) -> None:
        """COPY ``rows(table)`` of every table (one group's, or all of them)."""
        self.send(self.prepare(rows))

    def prepare(self, rows: Callable[[str], Iterable[tuple[Any, ...]]],
                missing: list[str] | None = None) -> list[Prepared]:
        """``rows(table)`` of every table in binary COPY format, vectors from the cache, ready
        for ``send`` (which may run on another thread while this one folds on, ADR-0036);
        texts whose vector the cache lacked are appended to ``missing`` (ADR-0039)."""
        started = time.perf_counter()
        out = []
        for table in self.rm.tables:
            statement, oids = self.copies[table.name]
            blocks, count = format_rows(self.conn, self.cache, table, oids, rows(table.name),
                                        self.model_id, missing)
            out.append(Prepared(table.name, statement, blocks, count))
        self.prepare_seconds += time.perf_counter() - started
        return out

    def send(self, prepared: list[Prepared]) -> None:
        """COPY what ``prepare`` formatted (``FREEZE``: the tables were created in this
        transaction), freeing each table's blocks once sent."""
        started = time.perf_counter()
        while prepared:
            copy = prepared.pop(0)
            send_blocks(self.conn, copy.statement, copy.blocks)
            self.out.rows[copy.table] += copy.rows
        self.send_seconds += time.perf_counter() - started

    def finish(self) -> ShadowBuild:
        """Commit the load, then ``ANALYZE``, keys, secondary indexes, HNSW last."""
        conn, rm, shadow, live, out = self.conn, self.rm, self.shadow, self.live, self.out
        out.copy_seconds = self.prepare_seconds + self.send_seconds
        out.load_seconds += out.copy_seconds
        try:
            started = time.perf_counter()
            conn.commit()
            with conn.transaction():  # statistics first: the index builds plan their workers
                conn.execute(shadow_search_path(shadow, live))
                for table in rm.tables:
                    conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(shadow, table.name)))
            out.load_seconds += time.perf_counter() - started
            with conn.transaction():
                conn.execute(shadow_search_path(shadow, live))
                conn.execute(f"SET LOCAL maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'")
                conn.execute(f"SET LOCAL max_parallel_maintenance_workers = {PARALLEL_WORKERS}")
                indexing = time.perf_counter()
                for table in rm.tables:
                    for statement in [table.primary_key_sql(), *table.indexes]:
                        conn.execute(statement)
                out.key_index_seconds = time.perf_counter() - indexing
                indexing = time.perf_counter()
                for table in rm.tables:
                    for statement in table.vector_index_sql():
                        conn.execute(statement)
                out.index_seconds = time.perf_counter() - indexing
        finally:
            self.close()
        return out

    def close(self) -> None:
        """Close both connections (an unfinished load rolls back: nothing was committed)."""
        self.cache.close()
        self.conn.close()


def drop_shadow(conninfo: str, shadow: str) -> None:
    """Drop the shadow schema and the replaced live tables (``<shadow>_old``), if any."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        for schema in (shadow, f"{shadow}_old"):
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(schema)))
