"""Rebuild read models from the event log, in bulk.

Read models are disposable: drop a projection's tables and tracking table, replay the log.
Replaying through the per-event projector costs one transaction per event; bulk mode instead:

1. reads the notification log in large pages (one pass feeds every projection being rebuilt)
   and folds it in memory (``projections.bulk``, same semantics as the projector);
2. embeds only texts missing from the embedding cache (batched, committed on their own so a
   vector is never paid twice; a warm cache means zero embedder calls);
3. in ONE transaction per projection: drop + recreate the tables without vector indexes, COPY
   the rows into a staging table, INSERT them joined to their cached vectors in SQL, build the
   HNSW indexes after the load (with more ``maintenance_work_mem``), and record the tracking
   position of the last event folded — rows and position commit together, so the projector
   resumes exactly after it.

Stop the projection's runner first (``ProjectionSet.rebuild`` does); readers of the dropped
tables block until the rebuild commits rather than seeing a half-built model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import InfrastructureFactory, Tracking
from eventsourcing.utils import Environment
from psycopg import sql
from pydantic import BaseModel

from engramdb.domain.ports import EmbeddingProvider
from engramdb.projections.bulk import COLUMNS, EMBEDDED_TEXT, FOLDS, ConversationFold, MemoryFold
from engramdb.projections.embeddings import (
    SQL_TEXT_HASH,
    CountingEmbedder,
    fill_cache_outside_transactions,
    text_hash,
)
from engramdb.projections.runner import PROJECTION_CLASSES, _names
from engramdb.projections.schema import EMBEDDING_CACHE_DDL, READ_MODEL_META_DDL
from engramdb.projections.views import VIEW_CLASSES, ReadModelView, bind_view

PAGE_SIZE = 5000
MAINTENANCE_WORK_MEM = "512MB"  # the HNSW graph of 100k x 384-d fits: no slow fallback
PARALLEL_WORKERS = 2


class RebuildReport(BaseModel):
    projections: list[str]
    events: int
    position: int | None
    seconds: float
    events_per_sec: float
    embed_calls: int
    texts_embedded: int
    rows: dict[str, int]
    read_seconds: float
    embed_seconds: float
    write_seconds: float
    index_seconds: float
    embedding_model: str


def _factory(name: str, env: dict[str, str]) -> Any:
    import os

    merged = dict(os.environ)
    merged.update(env)
    return InfrastructureFactory.construct(env=Environment(name, merged))


def rebuild(
    application_class: type[Any],
    env: dict[str, str],
    embedder: EmbeddingProvider,
    projection: str | Sequence[str] | None = None,
    progress: bool = False,
    page_size: int = PAGE_SIZE,
) -> RebuildReport:
    """Drop and rebuild ``projection`` (default: all) from the log; see the module doc."""
    names = _names(projection)
    counting = CountingEmbedder(embedder)
    started = time.perf_counter()
    app = application_class(env)
    try:
        folds = {name: FOLDS[name]() for name in names}
        events, position = _read_log(app, folds, page_size, progress)
        read_done = time.perf_counter()
        factories = {name: _factory(PROJECTION_CLASSES[name].name, env) for name in names}
        try:
            for name in names:
                _fill_embeddings(factories[name].datastore, counting, folds[name])
            embed_done = time.perf_counter()
            rows: dict[str, int] = {}
            index_seconds = 0.0
            for name in names:
                counts, indexing = _write(
                    factories[name].datastore, name, counting, folds[name], app.name, position
                )
                rows.update(counts)
                index_seconds += indexing
        finally:
            for factory in factories.values():
                factory.close()
    finally:
        app.close()
    done = time.perf_counter()
    seconds = done - started
    return RebuildReport(
        projections=list(names),
        events=events,
        position=position,
        seconds=seconds,
        events_per_sec=events / seconds if seconds > 0 else 0.0,
        embed_calls=counting.calls,
        texts_embedded=counting.texts,
        rows=rows,
        read_seconds=read_done - started,
        embed_seconds=embed_done - read_done,
        write_seconds=done - embed_done,
        index_seconds=index_seconds,
        embedding_model=embedder.model_id,
    )


def _read_log(
    app: Any, folds: dict[str, ConversationFold | MemoryFold], page_size: int, progress: bool
) -> tuple[int, int | None]:
    """One pass over the notification log up to its current end, feeding every fold."""
    stop = app.recorder.max_notification_id()
    if stop is None:
        return 0, None
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=stop, unit="ev", desc="rebuild")
    to_event = app.mapper.to_domain_event
    applies = [f.apply for f in folds.values()]
    count, last = 0, 0
    try:
        while last < stop:
            page = app.recorder.select_notifications(
                start=last, limit=page_size, stop=stop, inclusive_of_start=False
            )
            if not page:
                break
            for notification in page:
                event = to_event(notification)
                for apply in applies:
                    apply(event)
            count += len(page)
            if bar is not None:
                bar.update(page[-1].id - last)
            last = page[-1].id
    finally:
        if bar is not None:
            bar.close()
    return count, stop


def _search_path(curs: Any, schema: str) -> None:
    curs.execute(sql.SQL("SET LOCAL search_path TO {}, public").format(sql.Identifier(schema)))


def _fill_embeddings(datastore: Any, embedder: CountingEmbedder, fold: Any) -> None:
    with datastore.transaction(commit=True) as curs:
        _search_path(curs, datastore.schema)
        for statement in EMBEDDING_CACHE_DDL + READ_MODEL_META_DDL:
            curs.execute(statement)
    texts = {text_hash(t): t for t in fold.texts()}
    if not texts:
        return
    fill_cache_outside_transactions(
        datastore, lambda curs: _search_path(curs, datastore.schema), embedder, texts.values()
    )


def _write(
    datastore: Any,
    name: str,
    embedder: EmbeddingProvider,
    fold: ConversationFold | MemoryFold,
    application_name: str,
    position: int | None,
) -> tuple[dict[str, int], float]:
    view_class = bind_view(VIEW_CLASSES[name], embedder)
    tracking_table = f"{PROJECTION_CLASSES[name].name.lower()}_tracking"
    view: ReadModelView = view_class(datastore, tracking_table_name=tracking_table, bulk=True)
    counts: dict[str, int] = {}
    with datastore.transaction(commit=True) as curs:
        _search_path(curs, datastore.schema)
        drop = [sql.Identifier(t) for t in fold.tables]
        drop.append(sql.Identifier(datastore.schema, tracking_table))
        curs.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.SQL(", ").join(drop)))
        curs.execute("DELETE FROM mem_read_model_meta WHERE projection = %s", (name,))
        view._create_table(curs)  # tables (no HNSW), tracking table, model metadata
        for table in fold.tables:
            counts[table] = _load(curs, table, fold.rows(table), embedder.model_id)
        indexing = time.perf_counter()
        curs.execute(f"SET LOCAL maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'")
        curs.execute(f"SET LOCAL max_parallel_maintenance_workers = {PARALLEL_WORKERS}")
        vector_ddl = [s for s in view.table_ddl(vector_indexes=True) if "USING hnsw" in s]
        for statement in vector_ddl:
            curs.execute(statement)
        indexing = time.perf_counter() - indexing
        if position is not None:
            view._insert_tracking(curs, Tracking(application_name, position))
        for table in fold.tables:
            curs.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
    return counts, indexing


def _load(curs: Any, table: str, rows: list[tuple[Any, ...]], model_id: str) -> int:
    if not rows:
        return 0
    cols = COLUMNS[table]
    col_list = sql.SQL(", ").join(sql.Identifier(c) for c in cols)
    text_col = EMBEDDED_TEXT.get(table)
    target = sql.Identifier(table)
    if text_col is not None:
        target = sql.Identifier(f"_stage_{table}")
        curs.execute(
            sql.SQL("CREATE TEMP TABLE {} (LIKE {}) ON COMMIT DROP").format(
                target, sql.Identifier(table)
            )
        )
    with curs.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(target, col_list)) as copy:
        for row in rows:
            copy.write_row(row)
    if text_col is not None:
        stage_cols = sql.SQL(", ").join(sql.Identifier("s", c) for c in cols)
        hash_expr = sql.SQL(SQL_TEXT_HASH.format(col='s."' + text_col + '"'))
        curs.execute(
            sql.SQL(
                "INSERT INTO {table} ({cols}, embedding) SELECT {stage_cols}, c.embedding "
                "FROM {stage} s LEFT JOIN mem_embedding_cache c "
                "ON c.model_id = %s AND c.text_hash = {hash}"
            ).format(
                table=sql.Identifier(table), cols=col_list, stage_cols=stage_cols,
                stage=target, hash=hash_expr,
            ),
            (model_id,),
        )
    return len(rows)
