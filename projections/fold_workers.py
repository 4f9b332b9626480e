"""Read, decode, fold and format groups of agents in worker processes; the rebuilding process
only COPYs the formatted blocks (ADR-0039).

Why: after ADR-0036 the folding thread was the rebuild's critical path — read + decode + fold
and the formatting of the COPY rows are Python, one interpreter, one core (a second Python
thread only fought it for the GIL), while PostgreSQL's COPY of the previous group ran beside
it. Agents share no row, so the groups of ``LogStream.plan`` (ADR-0032) are independent: a
worker process per group reads its events on a connection of its own, decodes and folds them
with the same fold code, looks its vectors up in the embedding cache and formats the rows in
binary COPY format, then hands the blocks to the rebuilding process, which writes them into
the shadow tables in its one load transaction — so every COPY is still ``FREEZE`` and the swap
is unchanged.

Protocol per group (one duplex pipe per worker): the parent sends ``(key_bytes, stop, oids)``;
the worker folds and formats; if the cache lacked a vector for some text it sends
``("missing", {read model: texts})`` — the parent embeds them (its embedder, counted, the
cache semantics of ADR-0005) and answers whether it did — and, if so, formats again; then it
sends ``("done", events, {read model: [(table, blocks, rows)]}, fold_s, {read model: format_s})``.
Errors come back as ``("error", traceback)``. Workers are started with ``spawn`` (the rebuilding process
holds connections, a connection pool and threads: ``fork`` would copy their locks).

Memory: a worker folds one group at a time and is given its next group only once the parent
has taken its blocks, so at most ``workers`` groups are being folded and one is being sent.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from engramdb.projections.bulk_copy import format_rows, register_flat_arrays, register_raw_vectors
from engramdb.projections.log_stream import LogStream
from engramdb.projections.read_model import BulkFold
from engramdb.projections.read_models import select
from engramdb.projections.shadow import Prepared, ShadowLoad

Blocks = list[tuple[str, list[bytes], int]]  # (table, COPY blocks, rows) of one read model


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to open the log and the cache (picklable: sent at spawn)."""

    application_class: type[Any]
    env: dict[str, str]
    conninfo: str
    live: str
    page_size: int
    read_models: tuple[str, ...]
    model_id: str


def worker_main(spec: WorkerSpec, pipe: Any) -> None:
    """A worker's loop: one group per message until ``None`` (the process's target)."""
    try:
        # the tables exist (the rebuilding process opened the application): two workers
        # running eventsourcing's unlocked DDL at once failed with "tuple concurrently updated"
        app = spec.application_class({**spec.env, "CREATE_TABLE": "n",
                                      "ENGRAMDB_CREATE_TABLE": "n"})
        rms = select(list(spec.read_models))
        conn = psycopg.connect(spec.conninfo, autocommit=True,
                               application_name="engramdb-rebuild-fold")
        register_raw_vectors(conn)
        register_flat_arrays(conn)
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(spec.live)))
    except BaseException:  # noqa: BLE001 - reported to the parent
        pipe.send(("error", traceback.format_exc()))
        return
    try:
        while (job := pipe.recv()) is not None:
            key_bytes, stop, oids = job
            try:
                pipe.send(_group(app, conn, spec, rms, key_bytes, stop, oids, pipe))
            except BaseException:  # noqa: BLE001 - reported to the parent
                pipe.send(("error", traceback.format_exc()))
                return
    finally:
        conn.close()
        app.close()


def fold_group(stream: LogStream, folds: dict[str, BulkFold], key_bytes: frozenset[int] | None,
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


def _group(app: Any, conn: Any, spec: WorkerSpec, rms: Sequence[Any],
           key_bytes: frozenset[int] | None, stop: int, oids: dict[str, list[int]],
           pipe: Any) -> tuple[Any, ...]:
    started = time.perf_counter()
    stream = LogStream(app, spec.conninfo, stop, spec.page_size)
    folds = {rm.name: rm.fold() for rm in rms}
    events = fold_group(stream, folds, key_bytes, None)
    folded = time.perf_counter()
    out: dict[str, Blocks] = {}
    missing: dict[str, list[str]] = {}
    seconds: dict[str, float] = {}
    for attempt in range(2):
        for rm in rms:
            t = time.perf_counter()
            out[rm.name], missing[rm.name] = _format(conn, rm, folds[rm.name], oids,
                                                     spec.model_id)
            seconds[rm.name] = seconds.get(rm.name, 0.0) + time.perf_counter() - t
        if attempt or not any(missing.values()):
            break  # (still missing after the fill: NULL vectors, as the in-process load)
        # a cold cache: the parent embeds them (and stores them), then format again —
        # unless it answers False (nothing was filled: ``fold_and_load``'s ``fill`` contract)
        pipe.send(("missing", missing))
        if not pipe.recv():
            break
    del folds
    return ("done", events, out, folded - started, seconds)


def _format(conn: Any, rm: Any, fold: Any, oids: dict[str, list[int]],
            model_id: str) -> tuple[Blocks, list[str]]:
    blocks: Blocks = []
    missing: list[str] = []
    for table in rm.tables:
        data, count = format_rows(conn, conn, table, oids[table.name], fold.rows(table.name),
                                  model_id, missing=missing)
        blocks.append((table.name, data, count))
    return blocks, missing


class FoldWorkers:
    """``workers`` processes started at once (their imports overlap the shadows' creation),
    fed groups by ``run``; ``close`` stops them."""

    def __init__(self, spec: WorkerSpec, workers: int) -> None:
        ctx = mp.get_context("spawn")
        self.pipes: list[Any] = []
        self.procs: list[Any] = []
        try:
            for i in range(workers):
                parent, child = ctx.Pipe(duplex=True)
                proc = ctx.Process(target=worker_main, args=(spec, child),
                                   name=f"engramdb-rebuild-fold-{i}", daemon=True)
                proc.start()
                child.close()
                self.pipes.append(parent)
                self.procs.append(proc)
        except BaseException:
            self.close()
            raise

    def run(
        self,
        plan: Sequence[frozenset[int] | None],
        stop: int,
        shadows: dict[str, ShadowLoad],
        fill: Callable[[dict[str, list[str]]], Any],
        out: Any,
        bar: Any = None,
    ) -> None:
        """Fold and format every group of ``plan`` in the workers (group *i* in worker
        *i mod workers*) and COPY the groups into ``shadows`` in plan order; ``fill``
        embeds texts the cache lacked. Adds to ``out`` (a ``rebuild.FoldLoad``)."""
        oids = {name: {t: o for t, (_, o) in shadow.copies.items()}
                for name, shadow in shadows.items()}
        flat = {t: o for per in oids.values() for t, o in per.items()}
        n = len(self.pipes)
        for g in range(min(n, len(plan))):
            self.pipes[g].send((plan[g], stop, flat))
        for g in range(len(plan)):
            pipe = self.pipes[g % n]
            t = time.perf_counter()
            msg = self._recv(pipe)
            if msg[0] == "missing":
                t2 = time.perf_counter()
                filled = bool(fill(msg[1]))
                out.fill_seconds += time.perf_counter() - t2
                pipe.send(filled)
                msg = self._recv(pipe)
            out.wait_seconds += time.perf_counter() - t
            _, events, formatted, fold_s, format_s = msg
            if g + n < len(plan):  # its next group: folded while this one is sent
                pipe.send((plan[g + n], stop, flat))
            out.events += events
            out.fold_seconds += fold_s
            for name, tables in formatted.items():
                shadow = shadows[name]
                shadow.prepare_seconds += format_s[name]
                shadow.send([Prepared(table, shadow.copies[table][0], blocks, rows)
                             for table, blocks, rows in tables])
            del formatted, msg
            if bar is not None:
                bar.update(events)

    @staticmethod
    def _recv(pipe: Any) -> Any:
        try:
            msg = pipe.recv()
        except EOFError:
            raise RuntimeError("a rebuild fold worker died") from None
        if msg[0] == "error":
            raise RuntimeError(f"a rebuild fold worker failed:\n{msg[1]}")
        return msg

    def close(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.send(None)
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join()
        for pipe in self.pipes:
            pipe.close()
