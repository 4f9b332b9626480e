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
   load; the log is folded in groups of agents (ADR-0032), and the COPY of one group runs on a
   loader thread while the next group is folded (``fold_and_load``, ADR-0036);
4. **swaps** it in (``projections.swap``): catches the shadow up with events appended meanwhile
   (applied by the model's own view, exactly once), then, under the live tracking table's lock,
   drops the live tables and moves the shadow's in, in one short transaction.

The live projector, here or in another process, keeps running until the swap and continues on
the new tables from the very position they record; readers see the old model until the swap
commits, then the new one — never an empty or half-built one. One rebuild per schema at a time
(an advisory lock; a second waits).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql
from pydantic import BaseModel

from engramdb.domain.ports import EmbeddingProvider
from engramdb.infra.advisory_locks import namespace
from engramdb.infra.pgsql import set_search_path
from engramdb.projections.embeddings import CountingEmbedder, fill_cache_outside_transactions
from engramdb.projections.fold_workers import FoldWorkers, WorkerSpec, fold_group
from engramdb.projections.log_stream import PAGE_SIZE, LogStream
from engramdb.projections.positions import APPLICATION_NAME, _conninfo
from engramdb.projections.read_model import ReadModel, datastore_factory
from engramdb.projections.read_models import select
from engramdb.projections.shadow import Prepared, ShadowBuild, ShadowLoad, drop_shadow
from engramdb.projections.swap import ShadowCatchUp, swap_in
from engramdb.projections.tables import EMBEDDING_CACHE_DDL, READ_MODEL_META_DDL

GROUP_EVENTS = 50_000  # at most this many events per group of agents (ADR-0032, ADR-0036)
PIPELINE_GROUPS = 4  # a log is cut in at least this many groups, so folds overlap loads
MIN_GROUP_EVENTS = 5_000  # ... unless they would be smaller than this (one pass)
# fold workers (processes, ADR-0039): read+decode+fold+format off the loading process. Two
# when the host has two cores or more: on the idle 2-core box they won 6 of 6 alternated
# rounds (fold+load 1.27-1.33x the in-process fold); on a box shared with other jobs, 6 of 11,
# at ~20 % more CPU per event — pass ``fold_workers=0`` to keep the fold in the process
FOLD_WORKERS = 2 if (os.cpu_count() or 1) >= 2 else 0
WORKER_PIPELINE_GROUPS = 4  # groups per worker: the first group's fold is the only wait


class RebuildReport(BaseModel):
    projections: list[str]
    events: int
    position: int | None
    seconds: float
    events_per_sec: float
    embed_calls: int
    texts_embedded: int
    rows: dict[str, int]
    read_seconds: float  # read + decode + fold (overlapped with the previous group's load)
    embed_seconds: float
    write_seconds: float  # everything but read+fold+load and embedding: indexes, swap...
    index_seconds: float  # HNSW builds
    embedding_model: str
    load_seconds: float = 0.0  # binary COPY into the shadow tables (+ create, ANALYZE)
    # wall time of read+fold+load: fold of one group overlaps the COPY of the previous one
    # (ADR-0036), so it is less than read + load; 0 = not measured (an older report)
    fold_load_seconds: float = 0.0
    key_index_seconds: float = 0.0  # primary keys, btree and GIN indexes
    catch_up_events: int = 0  # appended during the rebuild, applied to the shadow
    swap_seconds: float = 0.0  # the swap transactions (projector paused: tracking lock)
    blocked_seconds: float = 0.0  # of which read-model tables locked (readers wait)

    @property
    def fold_load_events_per_sec(self) -> float:
        """Events per second of read+fold+load, wall time (embedding and index builds
        excluded)."""
        busy = self.fold_load_seconds or self.read_seconds + self.load_seconds
        return self.events / busy if busy > 0 else 0.0


@dataclass
class _Tally:
    """What one rebuild measured, stage by stage: the figures of its ``RebuildReport``."""

    events: int = 0
    read: float = 0.0
    embed: float = 0.0
    fold_load: float = 0.0
    load: float = 0.0
    key_index: float = 0.0
    index: float = 0.0
    swap: float = 0.0
    blocked: float = 0.0
    caught_up: int = 0
    rows: dict[str, int] = field(default_factory=dict)

    def loaded(self, loaded: FoldLoad) -> None:
        self.events, self.read, self.embed = loaded.events, loaded.fold_seconds, loaded.fill_seconds
        self.fold_load = loaded.seconds - loaded.fill_seconds

    def built(self, built: ShadowBuild) -> None:
        self.rows.update(built.rows)
        self.load += built.load_seconds
        self.fold_load += built.load_seconds - built.copy_seconds  # create + ANALYZE
        self.key_index += built.key_index_seconds
        self.index += built.index_seconds

    def report(self, names: list[str], position: int | None, seconds: float,
               counting: CountingEmbedder, model_id: str) -> RebuildReport:
        return RebuildReport(
            projections=names,
            events=self.events,
            position=position,
            seconds=seconds,
            events_per_sec=self.events / seconds if seconds > 0 else 0.0,
            embed_calls=counting.calls,
            texts_embedded=counting.texts,
            rows=self.rows,
            read_seconds=self.read,
            embed_seconds=self.embed,
            write_seconds=seconds - self.fold_load - self.embed,  # keys, indexes, catch-up, swap
            index_seconds=self.index,
            embedding_model=model_id,
            load_seconds=self.load,
            fold_load_seconds=self.fold_load,
            key_index_seconds=self.key_index,
            catch_up_events=self.caught_up,
            swap_seconds=self.swap,
            blocked_seconds=self.blocked,
        )


def rebuild(
    application_class: type[Any],
    env: dict[str, str],
    embedder: EmbeddingProvider,
    projection: str | Sequence[str] | None = None,
    progress: bool = False,
    page_size: int = PAGE_SIZE,
    group_events: int = GROUP_EVENTS,
    fold_workers: int | None = None,
) -> RebuildReport:
    """Rebuild ``projection`` (default: all) from the log and swap it in; see the module doc."""
    read_models = select(projection)
    names = [rm.name for rm in read_models]
    counting = CountingEmbedder(embedder)
    live = env.get("POSTGRES_SCHEMA", "public")
    conninfo = _conninfo(env)
    started = time.perf_counter()
    app = application_class(env)
    tally = _Tally()
    try:
        with _rebuild_lock(conninfo, live):
            position = app.recorder.max_notification_id()
            for name in names:
                _prepare_cache(env, name, live)
            shadows: dict[str, ShadowLoad] = {}
            pool: FoldWorkers | None = None
            try:
                stream = LogStream(app, conninfo, position or 0, page_size)
                workers = FOLD_WORKERS if fold_workers is None else fold_workers
                plan = stream.plan(pipeline_group_events(position or 0, group_events,
                                                         workers))
                if workers > 0 and len(plan) > 1 and position is not None:
                    # started first: their imports overlap the shadows' creation
                    pool = FoldWorkers(WorkerSpec(application_class, env, conninfo, live,
                                                  page_size, tuple(names), embedder.model_id),
                                       min(workers, len(plan)))
                for rm in read_models:
                    shadows[rm.name] = ShadowLoad(conninfo, live, rm, embedder.model_id,
                                                  embedder.dimensions, app.name, position)
                fill = _cache_filler(env, conninfo, live, names, counting)
                bar = _progress(progress, position)
                if pool is not None:
                    loaded = FoldLoad(groups=len(plan))
                    t = time.perf_counter()
                    pool.run(plan, position or 0, shadows, fill, loaded, bar)
                    loaded.seconds = time.perf_counter() - t
                else:
                    loaded = fold_and_load(stream, plan, read_models, shadows, fill, bar,
                                           fold=position is not None)
                tally.loaded(loaded)
                if bar is not None:
                    bar.close()
                for rm in read_models:
                    built = finish_shadow(shadows.pop(rm.name))
                    tally.built(built)
                    _catch_up_and_swap(app, env, conninfo, live, rm, built, counting, embedder,
                                       position, tally)
            finally:
                if pool is not None:
                    pool.close()
                for shadow in shadows.values():  # a failed rebuild: roll its loads back
                    shadow.close()
    finally:
        app.close()
    return tally.report(names, position, time.perf_counter() - started, counting,
                        embedder.model_id)


def _cache_filler(env: dict[str, str], conninfo: str, live: str, names: list[str],
                  counting: CountingEmbedder) -> Callable[[dict[str, list[str]]], bool]:
    """The fold's "embed these texts" callback: fills the embedding cache outside any
    transaction, so the load that follows finds every vector by lookup."""

    def fill(texts: dict[str, list[str]]) -> bool:
        fresh = sum(_fill_embeddings(env, name, live, counting, texts.get(name, []))
                    for name in names)
        if fresh:  # many fresh cache rows: give the planner statistics before the
            _analyze_cache(conninfo, live)  # load's lookups (index, not seq scan)
        return True  # in the cache now (embedded here, or by a projector): format again

    return fill


def _catch_up_and_swap(app: Any, env: dict[str, str], conninfo: str, live: str, rm: ReadModel,
                       built: ShadowBuild, counting: CountingEmbedder,
                       embedder: EmbeddingProvider, position: int | None, tally: _Tally) -> None:
    """Apply the events recorded since the load to the shadow, swap it in, drop the old."""
    catch_up = ShadowCatchUp(app, env, rm, counting, live, built.schema, position)
    try:
        result = swap_in(conninfo, catch_up, rm, live, built.schema,
                         embedder.model_id, embedder.dimensions)
    finally:
        catch_up.close()
        drop_shadow(conninfo, built.schema)
    tally.caught_up += result.caught_up
    tally.swap += result.seconds
    tally.blocked += result.blocked_seconds


def finish_shadow(shadow: ShadowLoad) -> ShadowBuild:
    """Keys, indexes and HNSW of a loaded shadow (a seam: tests append events here)."""
    return shadow.finish()


def _progress(progress: bool, position: int | None) -> Any:
    if not progress or position is None:
        return None
    from tqdm import tqdm

    return tqdm(total=position, unit="ev", desc="rebuild")


def pipeline_group_events(events: int, group_events: int, workers: int = 0) -> int:
    """The group size for a log of ``events``: at most ``group_events`` (memory), and small
    enough that the log is cut in ``PIPELINE_GROUPS`` groups — the first group's fold and the
    last one's load are the only steps ``fold_and_load`` cannot overlap —, but never below
    ``MIN_GROUP_EVENTS`` (each group is a pass over the log: a small log is read once).
    With fold ``workers`` (ADR-0039), ``WORKER_PIPELINE_GROUPS`` groups per worker: nothing
    is loaded until the first group is folded, so that group is kept small."""
    if group_events <= 0:
        return group_events
    groups = max(PIPELINE_GROUPS, WORKER_PIPELINE_GROUPS * workers)
    return min(group_events, max(MIN_GROUP_EVENTS, -(-events // groups)))


@dataclass
class FoldLoad:
    """What ``fold_and_load`` did, in seconds of the calling thread (and wall time)."""

    events: int = 0
    groups: int = 0
    fold_seconds: float = 0.0  # read + decode + fold (overlapped with the previous load)
    wait_seconds: float = 0.0  # waiting for the previous group's load to finish
    fill_seconds: float = 0.0  # embedding-cache fills (nothing else runs meanwhile)
    seconds: float = 0.0  # wall time of the whole


def fold_and_load(
    stream: LogStream,
    plan: Sequence[frozenset[int] | None],
    read_models: Sequence[ReadModel],
    shadows: dict[str, ShadowLoad],
    fill: Callable[[dict[str, list[str]]], Any],
    bar: Any = None,
    fold: bool = True,
    overlap: bool = True,
) -> FoldLoad:
    """Fold each group of agents of ``plan`` and load it into ``shadows``, the load of a group
    overlapping the fold of the next (ADR-0036).

    Why: a group's COPY is mostly PostgreSQL's work (generated ``tsvector`` columns, heap and
    WAL writes of the vector rows) in its backend, on another core, while the fold is this
    process's Python; one after the other they added up. A loader thread COPYs group *i*
    (waiting on its socket with the GIL released) while this thread folds group *i + 1*.
    Memory: at most two groups' rows — the one loading and the one folding — so groups are half
    the size they were (``GROUP_EVENTS``). A group is formatted after the previous load
    finished; the vector look-ups of the formatting report the texts the cache lacks, and only
    then ``fill(texts)`` embeds them (and, if it returns true, the group is formatted again):
    a warm cache costs no look-up beyond the formatting's own (before ADR-0039 every text was
    looked up once more before it, ≈ 1 s at 100k facts). The fill and the second format
    overlap nothing, so ``seconds - fill_seconds`` is the wall time of read+fold+load alone.
    ``overlap=False``: each load is waited for at once (the measurements' serial yardstick)."""
    out = FoldLoad(groups=len(plan))
    started = time.perf_counter()
    with ThreadPoolExecutor(1, thread_name_prefix="rebuild-load") as loader:
        loading: Future[None] | None = None
        for key_bytes in plan:
            t = time.perf_counter()
            folds = {rm.name: rm.fold() for rm in read_models}
            if fold:
                out.events += fold_group(stream, folds, key_bytes, bar)
            t1 = time.perf_counter()
            out.fold_seconds += t1 - t
            if loading is not None:
                loading.result()
            t2 = time.perf_counter()
            out.wait_seconds += t2 - t1
            missing: dict[str, list[str]] = {rm.name: [] for rm in read_models}
            prepared = {rm.name: shadows[rm.name].prepare(folds[rm.name].rows, missing[rm.name])
                        for rm in read_models}
            t3 = time.perf_counter()
            # texts the cache lacks (a cold cache): embed them, then format the group again
            if any(missing.values()) and fill(missing):
                del prepared
                prepared = {rm.name: shadows[rm.name].prepare(folds[rm.name].rows)
                            for rm in read_models}
            if any(missing.values()):
                out.fill_seconds += time.perf_counter() - t3  # (and the second format)
            del folds  # the group's rows: freed, its COPY data kept until sent
            loading = loader.submit(_send_group, shadows, prepared)
            del prepared
            if not overlap:
                t = time.perf_counter()
                loading.result()
                out.wait_seconds += time.perf_counter() - t
        if loading is not None:
            t = time.perf_counter()
            loading.result()
            out.wait_seconds += time.perf_counter() - t
    out.seconds = time.perf_counter() - started
    return out


def _send_group(shadows: dict[str, ShadowLoad], prepared: dict[str, list[Prepared]]) -> None:
    """COPY one group's formatted rows (the loader thread)."""
    for name in list(prepared):
        shadows[name].send(prepared.pop(name))


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
                     texts: list[str]) -> int:
    """Embed the texts the cache lacks; returns how many were embedded."""
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
