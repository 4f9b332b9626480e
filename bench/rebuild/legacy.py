"""The previous rebuild (in place, text COPY, readers blocked), kept ONLY so ``bench.rebuild.run``
can compare the new path against it in the same run. Not used by the product.

Original description:


Read models are disposable: drop a projection's tables and tracking table, replay the log.
Replaying through the per-event projector costs one transaction per event; bulk mode instead:

1. reads the notification log in large pages (one pass feeds every projection being rebuilt)
   and folds it in memory (each read model's ``BulkFold``, same semantics as its view);
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

from eventsourcing.persistence import Tracking
from psycopg import sql
from psycopg.adapt import Dumper

from engramdb.domain.ports import EmbeddingProvider
from engramdb.infra.pgsql import set_search_path
from engramdb.projections.bulk_copy import JsonbBytes
from engramdb.projections.embeddings import (
    SQL_TEXT_HASH,
    CountingEmbedder,
    fill_cache_outside_transactions,
    text_hash,
)
from engramdb.projections.read_model import (
    BulkFold,
    ReadModel,
    ReadModelView,
    bind_view,
    datastore_factory,
)
from engramdb.projections.read_models import select
from engramdb.projections.rebuild import RebuildReport
from engramdb.projections.tables import EMBEDDING_CACHE_DDL, READ_MODEL_META_DDL, Table

PAGE_SIZE = 5000
MAINTENANCE_WORK_MEM = "512MB"  # the HNSW graph of 100k x 384-d fits: no slow fallback
PARALLEL_WORKERS = 2


def rebuild_legacy(
    application_class: type[Any],
    env: dict[str, str],
    embedder: EmbeddingProvider,
    projection: str | Sequence[str] | None = None,
    progress: bool = False,
    page_size: int = PAGE_SIZE,
) -> RebuildReport:
    """Drop and rebuild ``projection`` (default: all) from the log; see the module doc."""
    read_models = select(projection)
    names = [rm.name for rm in read_models]
    counting = CountingEmbedder(embedder)
    started = time.perf_counter()
    app = application_class(env)
    try:
        folds = {rm.name: rm.fold() for rm in read_models}
        events, position = _read_log(app, folds, page_size, progress)
        read_done = time.perf_counter()
        factories = {name: datastore_factory(name, env) for name in names}
        try:
            for name in names:
                _fill_embeddings(factories[name].datastore, counting, folds[name])
            embed_done = time.perf_counter()
            rows: dict[str, int] = {}
            index_seconds = 0.0
            for rm in read_models:
                counts, indexing = _write(
                    factories[rm.name].datastore, rm, counting, folds[rm.name], app.name,
                    position,
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
        projections=names,
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
    app: Any, folds: dict[str, BulkFold], page_size: int, progress: bool
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


def _fill_embeddings(datastore: Any, embedder: CountingEmbedder, fold: BulkFold) -> None:
    with datastore.transaction(commit=True) as curs:
        set_search_path(curs, datastore.schema)
        for statement in EMBEDDING_CACHE_DDL + READ_MODEL_META_DDL:
            curs.execute(statement)
    texts = {text_hash(t): t for t in fold.texts()}
    if not texts:
        return
    fill_cache_outside_transactions(
        datastore, lambda curs: set_search_path(curs, datastore.schema), embedder, texts.values()
    )


def _write(
    datastore: Any,
    rm: ReadModel,
    embedder: EmbeddingProvider,
    fold: BulkFold,
    application_name: str,
    position: int | None,
) -> tuple[dict[str, int], float]:
    tracking_table = f"{rm.name}_tracking"
    view: ReadModelView | None = None
    if rm.projected:
        view_class = bind_view(rm.view, embedder)
        view = view_class(datastore, tracking_table_name=tracking_table, bulk=True)
    counts: dict[str, int] = {}
    with datastore.transaction(commit=True) as curs:
        set_search_path(curs, datastore.schema)
        drop = [sql.Identifier(t) for t in rm.table_names]
        drop.append(sql.Identifier(datastore.schema, tracking_table))
        curs.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.SQL(", ").join(drop)))
        curs.execute("DELETE FROM mem_read_model_meta WHERE projection = %s", (rm.name,))
        if view is not None:
            view._create_table(curs)  # tables (no HNSW), tracking table, model metadata
        else:
            for statement in rm.ddl(embedder.dimensions, vector_indexes=False):
                curs.execute(statement)
        for table in rm.tables:
            counts[table.name] = _load(curs, table, list(fold.rows(table.name)), embedder.model_id)
        indexing = time.perf_counter()
        curs.execute(f"SET LOCAL maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'")
        curs.execute(f"SET LOCAL max_parallel_maintenance_workers = {PARALLEL_WORKERS}")
        for table in rm.tables:
            for statement in table.vector_index_sql():
                curs.execute(statement)
        indexing = time.perf_counter() - indexing
        if position is not None and view is not None:
            view._insert_tracking(curs, Tracking(application_name, position))
        for table in rm.tables:
            curs.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table.name)))
    return counts, indexing


class _JsonbText(Dumper):
    """The folds now give ``mem_facts.decided_by`` pre-encoded for the binary COPY
    (``bulk_copy.JsonbBytes``, ADR-0039): its JSON text for this text COPY."""

    oid = 3802  # jsonb

    def dump(self, obj: Any) -> bytes:
        return bytes(obj[1:])


def _load(curs: Any, table: Table, rows: list[tuple[Any, ...]], model_id: str) -> int:
    if not rows:
        return 0
    cols = table.row_columns
    col_list = sql.SQL(", ").join(sql.Identifier(c) for c in cols)
    text_col = table.embedded_text
    target = sql.Identifier(table.name)
    if text_col is not None:
        target = sql.Identifier(f"_stage_{table.name}")
        curs.execute(
            sql.SQL("CREATE TEMP TABLE {} (LIKE {}) ON COMMIT DROP").format(
                target, sql.Identifier(table.name)
            )
        )
    curs.connection.adapters.register_dumper(JsonbBytes, _JsonbText)
    with curs.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(target, col_list)) as copy:
        for row in rows:
            copy.write_row(row)
    if text_col is not None:
        stage_cols = sql.SQL(", ").join(sql.Identifier("s", c) for c in cols)
        hash_expr = sql.SQL(SQL_TEXT_HASH.format(col=table.embedded_expression("s")))
        curs.execute(
            sql.SQL(
                "INSERT INTO {table} ({cols}, embedding) SELECT {stage_cols}, c.embedding "
                "FROM {stage} s LEFT JOIN mem_embedding_cache c "
                "ON c.model_id = %s AND c.text_hash = {hash}"
            ).format(
                table=sql.Identifier(table.name), cols=col_list, stage_cols=stage_cols,
                stage=target, hash=hash_expr,
            ),
            (model_id,),
        )
    return len(rows)
