"""Rebuild read models from the event log, in bulk, without downtime (ADR-0005, ADR-0027).

Read models are disposable: replay the log into fresh tables. Replaying through the per-event
projector costs a transaction per batch; bulk mode instead:

1. **reads** the notification log once, streamed in pages (a reader thread fetches the next page
   while this one decodes and folds), feeding every rebuilt read model's ``BulkFold`` (same
   semantics as its view): memory holds the folded rows, never the log;
2. **embeds** only texts missing from the embedding cache (batched, committed on their own: a
   vector is never paid twice; a warm cache means zero embedder calls);
3. **loads** each read model into a private shadow schema (``projections.shadow``): binary COPY,
   vectors copied from the cache byte for byte, keys and indexes — HNSW last — built after the
   load;
4. **swaps** it in (``projections.swap``): catches the shadow up with events appended meanwhile
   (applied by the model's own view, exactly once), then, under the live tracking table's lock,
   drops the live tables and moves the shadow's in, in one short transaction.

The live projector, here or in another process, keeps running until the swap and continues on
the new tables from the very position they record; readers see the old model until the swap
commits, then the new one — never an empty or half-built one. One rebuild per schema at a time
(an advisory lock; a second waits).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql
from pydantic import BaseModel

from engramdb.domain.ports import EmbeddingProvider
from engramdb.infra.advisory_locks import namespace
from engramdb.infra.pgsql import set_search_path
from engramdb.projections.embeddings import CountingEmbedder, fill_cache_outside_transactions
from engramdb.projections.log_stream import PAGE_SIZE, LogStream
from engramdb.projections.positions import APPLICATION_NAME, _conninfo
from engramdb.projections.read_model import BulkFold, datastore_factory
from engramdb.projections.read_models import select
from engramdb.projections.shadow import ShadowBuild, ShadowLoad, drop_shadow
from engramdb.projections.swap import ShadowCatchUp, swap_in
from engramdb.projections.tables import EMBEDDING_CACHE_DDL, READ_MODEL_META_DDL

GROUP_EVENTS = 100_000  # events per group of agents folded and loaded at once (ADR-0032)


class RebuildReport(BaseModel):
    projections: list[str]
    events: int
    position: int | None
    seconds: float
    events_per_sec: float
    embed_calls: int
    texts_embedded: int
    rows: dict[str, int]
    read_seconds: float  # read + decode + fold
    embed_seconds: float
    write_seconds: float  # everything after embedding: load, indexes, catch-up, swap
    index_seconds: float  # HNSW builds
    embedding_model: str
    load_seconds: float = 0.0  # binary COPY into the shadow tables
    key_index_seconds: float = 0.0  # primary keys, btree and GIN indexes
    catch_up_events: int = 0  # appended during the rebuild, applied to the shadow
    swap_seconds: float = 0.0  # the swap transactions (projector paused: tracking lock)
    blocked_seconds: float = 0.0  # of which read-model tables locked (readers wait)

    @property
    def fold_load_events_per_sec(self) -> float:
        """Events per second of read+fold+load (embedding and index builds excluded)."""
        busy = self.read_seconds + self.load_seconds
        return self.events / busy if busy > 0 else 0.0


def rebuild(
    application_class: type[Any],
    env: dict[str, str],
    embedder: EmbeddingProvider,
    projection: str | Sequence[str] | None = None,
    progress: bool = False,
    page_size: int = PAGE_SIZE,
    group_events: int = GROUP_EVENTS,
) -> RebuildReport:
    """Rebuild ``projection`` (default: all) from the log and swap it in; see the module doc."""
    read_models = select(projection)
    names = [rm.name for rm in read_models]
    counting = CountingEmbedder(embedder)
    live = env.get("POSTGRES_SCHEMA", "public")
    conninfo = _conninfo(env)
    started = time.perf_counter()
    app = application_class(env)
    read = embed = 0.0
    events = 0
    rows: dict[str, int] = {}
    load = key_index = index = swap = blocked = 0.0
    caught_up = 0
    try:
        with _rebuild_lock(conninfo, live):
            position = app.recorder.max_notification_id()
            for name in names:
                _prepare_cache(env, name, live)
            shadows: dict[str, ShadowLoad] = {}
            try:
                for rm in read_models:
                    shadows[rm.name] = ShadowLoad(conninfo, live, rm, embedder.model_id,
                                                  embedder.dimensions, app.name, position)
                stream = LogStream(app, conninfo, position or 0, page_size)
                plan = stream.plan(group_events)
                bar = _progress(progress, position)
                for key_bytes in plan:  # fold one group of agents, load it, free it
                    t = time.perf_counter()
                    folds = {rm.name: rm.fold() for rm in read_models}
                    if position is not None:
                        events += _fold(stream, folds, key_bytes, bar)
                    t1 = time.perf_counter()
                    read += t1 - t
                    fresh = sum(_fill_embeddings(env, name, live, counting, folds[name])
                                for name in names)
                    if fresh:  # many fresh cache rows: give the planner statistics before the
                        _analyze_cache(conninfo, live)  # load's lookups (index, not seq scan)
                    embed += time.perf_counter() - t1
                    for rm in read_models:
                        shadows[rm.name].load(folds.pop(rm.name).rows)
                    del folds
                if bar is not None:
                    bar.close()
                for rm in read_models:
                    built = finish_shadow(shadows.pop(rm.name))
                    rows.update(built.rows)
                    load += built.load_seconds
                    key_index += built.key_index_seconds
                    index += built.index_seconds
                    catch_up = ShadowCatchUp(app, env, rm, counting, live, built.schema, position)
                    try:
                        result = swap_in(conninfo, catch_up, rm, live, built.schema,
                                         embedder.model_id, embedder.dimensions)
                    finally:
                        catch_up.close()
                        drop_shadow(conninfo, built.schema)
                    caught_up += result.caught_up
                    swap += result.seconds
                    blocked += result.blocked_seconds
            finally:
                for shadow in shadows.values():  # a failed rebuild: roll its loads back
                    shadow.close()
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
        read_seconds=read,
        embed_seconds=embed,
        write_seconds=seconds - read - embed - load,
        index_seconds=index,
        embedding_model=embedder.model_id,
        load_seconds=load,
        key_index_seconds=key_index,
        catch_up_events=caught_up,
        swap_seconds=swap,
        blocked_seconds=blocked,
    )


def finish_shadow(shadow: ShadowLoad) -> ShadowBuild:
    """Keys, indexes and HNSW of a loaded shadow (a seam: tests append events here)."""
    return shadow.finish()


def _progress(progress: bool, position: int | None) -> Any:
    if not progress or position is None:
        return None
    from tqdm import tqdm

    return tqdm(total=position, unit="ev", desc="rebuild")


def _fold(stream: LogStream, folds: dict[str, BulkFold], key_bytes: frozenset[int] | None,
          bar: Any) -> int:
    """One pass over the log for one group of agents, feeding every fold."""
    applies = [f.apply for f in folds.values()]
    count = 0
    for page in stream.group_pages(key_bytes):
        for event in page:
            for apply in applies:
                apply(event)
        count += len(page)
        if bar is not None:
            bar.update(len(page))
    return count


class _rebuild_lock:
    """Session advisory lock: one rebuild per schema at a time (they share shadow names)."""

    def __init__(self, conninfo: str, schema: str) -> None:
        self.conninfo = conninfo
        self.key = namespace("rebuild", schema, APPLICATION_NAME)
        self.conn: Any = None

    def __enter__(self) -> None:
        self.conn = psycopg.connect(self.conninfo, autocommit=True,
                                    application_name="engramdb-rebuild")
        self.conn.execute("SELECT pg_advisory_lock(%s)", (self.key,))

    def __exit__(self, *exc: object) -> None:
        self.conn.close()  # the session ends: the lock is released


def _prepare_cache(env: dict[str, str], name: str, live: str) -> None:
    """The shared embedding cache and model metadata tables, if missing."""
    factory = datastore_factory(name, env)
    try:
        with factory.datastore.transaction(commit=True) as curs:
            set_search_path(curs, live)
            for statement in EMBEDDING_CACHE_DDL + READ_MODEL_META_DDL:
                curs.execute(statement)
    finally:
        factory.close()


def _fill_embeddings(env: dict[str, str], name: str, live: str, embedder: CountingEmbedder,
                     fold: BulkFold) -> int:
    """Embed the fold's texts the cache lacks; returns how many were embedded."""
    texts = fold.texts()
    if not texts:
        return 0
    before = embedder.texts
    factory = datastore_factory(name, env)
    try:
        fill_cache_outside_transactions(
            factory.datastore, lambda curs: set_search_path(curs, live), embedder, texts)
    finally:
        factory.close()
    return embedder.texts - before


def _analyze_cache(conninfo: str, live: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("ANALYZE {}.mem_embedding_cache").format(sql.Identifier(live)))
