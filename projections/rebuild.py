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

import contextlib
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg import sql
from pydantic import BaseModel

from engramdb.domain.ports import EmbeddingProvider
from engramdb.infra.advisory_locks import namespace
from engramdb.infra.pgsql import set_search_path
from engramdb.projections.embeddings import CountingEmbedder, fill_cache_outside_transactions
from engramdb.projections.positions import APPLICATION_NAME, _conninfo
from engramdb.projections.read_model import BulkFold, datastore_factory
from engramdb.projections.read_models import select
from engramdb.projections.shadow import build_shadow, drop_shadow
from engramdb.projections.swap import ShadowCatchUp, swap_in
from engramdb.projections.tables import EMBEDDING_CACHE_DDL, READ_MODEL_META_DDL

PAGE_SIZE = 5000


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
) -> RebuildReport:
    """Rebuild ``projection`` (default: all) from the log and swap it in; see the module doc."""
    read_models = select(projection)
    names = [rm.name for rm in read_models]
    counting = CountingEmbedder(embedder)
    live = env.get("POSTGRES_SCHEMA", "public")
    conninfo = _conninfo(env)
    started = time.perf_counter()
    app = application_class(env)
    try:
        with _rebuild_lock(conninfo, live):
            folds = {rm.name: rm.fold() for rm in read_models}
            events, position = _read_log(app, folds, page_size, progress)
            read_done = time.perf_counter()
            for name in names:
                _fill_embeddings(env, name, live, counting, folds[name])
            if counting.texts:  # many fresh cache rows: give the planner statistics before the
                _analyze_cache(conninfo, live)  # load's per-chunk lookups (index, not seq scan)
            embed_done = time.perf_counter()
            rows: dict[str, int] = {}
            load = key_index = index = swap = blocked = 0.0
            caught_up = 0
            for rm in read_models:
                fold = folds.pop(rm.name)  # freed once loaded
                built = build_shadow(conninfo, live, rm, fold.rows, embedder.model_id,
                                     embedder.dimensions, app.name, position)
                del fold
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
        index_seconds=index,
        embedding_model=embedder.model_id,
        load_seconds=load,
        key_index_seconds=key_index,
        catch_up_events=caught_up,
        swap_seconds=swap,
        blocked_seconds=blocked,
    )


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


def _pages(app: Any, stop: int, page_size: int) -> Iterator[list[Any]]:
    """Pages of notifications up to ``stop``, the next one fetched by a thread while the
    caller folds this one (the fetch waits on the socket with the GIL released)."""
    pages: queue.Queue[Any] = queue.Queue(maxsize=2)  # bounded: at most 3 pages in memory
    done = object()

    def fetch() -> None:
        last = 0
        try:
            while last < stop:
                page = app.recorder.select_notifications(
                    start=last, limit=page_size, stop=stop, inclusive_of_start=False)
                if not page:
                    break
                pages.put(page)
                last = page[-1].id
            pages.put(done)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            pages.put(exc)

    reader = threading.Thread(target=fetch, name="rebuild-reader", daemon=True)
    reader.start()
    try:
        while (item := pages.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        while reader.is_alive():  # unblock a reader waiting on a full queue
            with contextlib.suppress(queue.Empty):
                pages.get(timeout=0.05)
        reader.join()


def _read_log(
    app: Any, folds: dict[str, BulkFold], page_size: int, progress: bool
) -> tuple[int, int | None]:
    """One streamed pass over the notification log up to its current end, feeding every fold."""
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
        for page in _pages(app, stop, page_size):
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


def _fill_embeddings(env: dict[str, str], name: str, live: str, embedder: CountingEmbedder,
                     fold: BulkFold) -> None:
    texts = fold.texts()
    factory = datastore_factory(name, env)
    try:
        datastore = factory.datastore
        with datastore.transaction(commit=True) as curs:
            set_search_path(curs, live)
            for statement in EMBEDDING_CACHE_DDL + READ_MODEL_META_DDL:
                curs.execute(statement)
        if texts:
            fill_cache_outside_transactions(
                datastore, lambda curs: set_search_path(curs, live), embedder, texts)
    finally:
        factory.close()


def _analyze_cache(conninfo: str, live: str) -> None:
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("ANALYZE {}.mem_embedding_cache").format(sql.Identifier(live)))
