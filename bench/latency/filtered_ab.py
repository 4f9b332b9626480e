"""The 2026-12-07 narrowed-retrieve changes on and off, in one run (issue 24, ADR-0047):

    python -m bench.latency.filtered_ab --schema NAME [--database-url URL] [--runs 4]
                                        [--queries 40] [--with-embedder]

Why a bench of its own: between two invocations of ``bench.latency.filtered`` this box moved
the unfiltered call by up to 10 %, more than the change measured. Here the same process, pool
and data run each contender under four settings, interleaved and rotated every run:

- ``all``: as shipped;
- ``no-merge``: the semantic search and the subject sweep read the listed facts apart
  (``sweep_merged.facts_merged`` answers no);
- ``no-listed``: the narrowed neighbour walk tests each turn's metadata, not the listed turns
  (``Narrowing.listed_turns`` answers ``None``);
- ``neither``: both off.

``--schema`` names a schema that ``bench.latency.filtered --schema NAME`` loaded (kept).
Printed: each contender's median over runs of p50 (ms) per setting.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections.abc import Callable, Sequence
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from psycopg_pool import ConnectionPool  # noqa: E402

from bench.latency.data import DIM, entity_names, unit  # noqa: E402
from bench.latency.filtered import contenders  # noqa: E402
from bench.latency.report import percentile  # noqa: E402
from bench.latency.retrieve import InLoopEmbedder, load_model, queries_for  # noqa: E402
from engramdb.infra.read_pool import open_worker_pool  # noqa: E402
from engramdb.services.retrieve import Retriever, sweep_merged  # noqa: E402
from engramdb.services.retrieve.signals import shared  # noqa: E402

LABELS = ("unfiltered", "session", "metadata-rare", "metadata-rare-spread")


def settings() -> dict[str, tuple[Callable[..., Any], Callable[..., Any]]]:
    merged, listed = sweep_merged.facts_merged, shared.Narrowing.listed_turns
    never_merged: Callable[..., Any] = lambda call, started: False  # noqa: E731
    never_listed: Callable[..., Any] = lambda self: None  # noqa: E731
    return {"all": (merged, listed), "no-merge": (never_merged, listed),
            "no-listed": (merged, never_listed), "neither": (never_merged, never_listed)}


def measure(retriever: Retriever, agent: str, queries: list[str], runs: int) -> dict[tuple[str, str], list[float]]:
    named = contenders(100)
    options = settings()
    got: dict[tuple[str, str], list[float]] = {(label, name): [] for label in LABELS for name in options}
    order = list(options.items())
    try:
        for run in range(runs):
            for name, (merged, listed) in order[run % len(order):] + order[: run % len(order)]:
                sweep_merged.facts_merged = merged  # type: ignore[assignment]
                shared.Narrowing.listed_turns = listed  # type: ignore[method-assign]
                for label in LABELS:
                    within = named[label]
                    if run == 0:  # warm-up: caches, prepared statements, pools
                        for i, text in enumerate(queries[:5]):
                            retriever.retrieve(agent, text, within=within(i))
                    times = [retriever.retrieve(agent, text, within=within(i)).duration_ms
                             for i, text in enumerate(queries)]
                    got[(label, name)].append(percentile(times, 50))
    finally:
        sweep_merged.facts_merged, shared.Narrowing.listed_turns = options["all"]  # type: ignore[assignment,method-assign]
    return got


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--schema", required=True, help="a schema bench.latency.filtered --schema loaded")
    ap.add_argument("--database-url", default=os.environ.get("ENGRAMDB_BENCH_DATABASE_URL"), required=False)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--with-embedder", action="store_true")
    args = ap.parse_args(argv)
    if not args.database_url:
        ap.error("--database-url (or ENGRAMDB_BENCH_DATABASE_URL): the server that holds --schema")
    rng = np.random.default_rng(7)  # the same vocabulary and centroids as bench.latency.filtered
    vocab = [f"w{i:04d}x" for i in range(2000)]
    centroids = unit(rng.normal(size=(400, DIM)).astype(np.float32))
    agent = f"bench-{args.size}"
    embedder = InLoopEmbedder(load_model(not args.with_embedder))
    pool = ConnectionPool(args.database_url, min_size=6, max_size=8,
                          kwargs={"options": f"-c search_path={args.schema},public"})
    pool.wait()
    workers = open_worker_pool(args.database_url, args.schema)
    retriever = Retriever(pool, embedder, worker_pool=workers)
    try:
        queries = queries_for(args.size, args.queries, entity_names(args.size, vocab), vocab, centroids, embedder)
        got = measure(retriever, agent, queries, args.runs)
    finally:
        retriever.close()
        workers.close()
        pool.close()
    names = list(settings())
    print(f"p50 ms, median of {args.runs} runs x {args.queries} queries, "
          f"{'WITH' if embedder.model is not None else 'without'} the query embedding")
    print(f"{'contender':<21}" + "".join(f"{n:>11}" for n in names))
    for label in LABELS:
        print(f"{label:<21}" + "".join(f"{statistics.median(got[(label, n)]):11.1f}" for n in names))


if __name__ == "__main__":
    main()
