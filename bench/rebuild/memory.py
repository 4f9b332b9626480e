"""Peak RSS and speed of the rebuild's read+fold+load at a size where the full rebuild (cold
embedding of every text, HNSW) would take hours here: groups of agents (ADR-0032) vs one pass.

Generates ``--facts`` facts as ``bench.rebuild.run`` does (20 agents), then, each in a fresh child
process (its own peak RSS), runs what ``projections.rebuild`` runs before its index builds: the
per-group plan, the streamed read + bulk decode + fold, and the binary COPY into the shadow
tables — rolled back at the end (no keys, no HNSW, no swap). The embedding cache is left cold:
vectors are looked up and found missing (NULL), so the load writes no vector bytes; memory and
the fold are what this measures.

    python -m bench.rebuild.memory --facts 1000000 [--group-events 100000 0]

``--group-events 0``: one pass over the whole log (the folded rows of every agent held until
the load, as before ADR-0032). ``--fold-workers N [M …]``: fold in N worker processes
(ADR-0039; default: the rebuild's own default, two on a host with two cores or more), each
count in turn; the workers' peak RSS is reported beside the rebuilding process's.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import time
from typing import Any

from bench.rebuild.run import generate
from bench.write.aggregate_cost import bench_schema
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.projections.fold_workers import FoldWorkers, WorkerSpec
from engramdb.projections.log_stream import LogStream
from engramdb.projections.positions import _conninfo
from engramdb.projections.read_models import select
from engramdb.projections.rebuild import (
    FOLD_WORKERS,
    GROUP_EVENTS,
    FoldLoad,
    fold_and_load,
    pipeline_group_events,
)
from engramdb.projections.shadow import ShadowLoad
from engramdb.services.memory.event_log import EventLog


def _child(env: dict[str, str], group_events: int, out: Any, overlap: bool = True,
           fold_workers: int = 0) -> None:
    app = EventLog(env)
    try:
        position = app.recorder.max_notification_id() or 0
        live, conninfo, embedder = env["POSTGRES_SCHEMA"], _conninfo(env), HashEmbedder()
        models = select(None)
        stream = LogStream(app, conninfo, position)
        plan = stream.plan(pipeline_group_events(position, group_events, fold_workers))
        pool = None
        if fold_workers > 0 and len(plan) > 1:  # as ``rebuild`` does: started first
            pool = FoldWorkers(WorkerSpec(type(app), env, conninfo, live, stream.page_size,
                                          tuple(rm.name for rm in models), embedder.model_id),
                               min(fold_workers, len(plan)))
        shadows = {rm.name: ShadowLoad(conninfo, live, rm, embedder.model_id,
                                       embedder.dimensions, app.name, position)
                   for rm in models}
        try:
            if pool is not None:
                loaded = FoldLoad(groups=len(plan))
                started = time.perf_counter()
                pool.run(plan, position, shadows, lambda texts: False, loaded)
                loaded.seconds = time.perf_counter() - started
            else:
                loaded = fold_and_load(stream, plan, models, shadows, lambda texts: None,
                                       overlap=overlap)
            events, read, total = loaded.events, loaded.fold_seconds, loaded.seconds
        finally:
            if pool is not None:
                pool.close()  # joined: their peak RSS is in RUSAGE_CHILDREN
            for shadow in shadows.values():
                shadow.close()  # rolled back
    finally:
        app.close()
    out.send({"group_events": group_events, "overlap": overlap, "groups": len(plan), "events": events,
              "read_fold_s": read, "fold_load_s": total, "fold_workers": fold_workers if pool else 0,
              "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
              "workers_rss_mb": (resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
                                 if pool else 0.0)})


def run(env: dict[str, str], group_events: int, overlap: bool = True,
        fold_workers: int = 0) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(env, group_events, child, overlap, fold_workers))
    proc.start()
    child.close()
    result: dict[str, Any] = parent.recv()
    proc.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--facts", type=int, default=1_000_000)
    parser.add_argument("--group-events", type=int, nargs="+", default=[GROUP_EVENTS])
    parser.add_argument("--serial", action="store_true",
                        help="also run each with the overlap off (ADR-0036), alternated")
    parser.add_argument("--fold-workers", type=int, nargs="+", default=[FOLD_WORKERS],
                        help="fold worker counts (ADR-0039; 0 = in process), each in turn")
    args = parser.parse_args()
    with bench_schema("bench_rbm") as (_, env):
        app = EventLog({**env, "IS_SNAPSHOTTING_ENABLED": "n"})
        t = time.perf_counter()
        n = generate(app, args.facts, 20, 1000)
        app.close()
        print(f"generated {n} facts in {time.perf_counter() - t:.1f}s", flush=True)
        for group_events in args.group_events:
            for workers in args.fold_workers:
                for overlap in (True, False) if args.serial and not workers else (True,):
                    _report(run(env, group_events, overlap, workers), overlap)


def _report(r: dict[str, Any], overlap: bool) -> None:
    how = (f"{r['fold_workers']} fold workers" if r["fold_workers"]
           else f"in process, overlap {'on' if overlap else 'off'}")
    workers = f", workers {r['workers_rss_mb']:.0f} MiB each at most" if r["fold_workers"] else ""
    print(f"group_events {r['group_events']:,} ({r['groups']} groups, {how}): "
          f"{r['events']:,} events, read+fold "
          f"{r['read_fold_s']:.1f}s ({r['events'] / r['read_fold_s']:,.0f} ev/s), "
          f"fold+load {r['fold_load_s']:.1f}s ({r['events'] / r['fold_load_s']:,.0f} ev/s), "
          f"peak RSS {r['peak_rss_mb']:.0f} MiB{workers}", flush=True)


if __name__ == "__main__":
    main()
