"""Filtered vs unfiltered retrieve at 100k facts (issue 24, ADR-0047), in one run:

    python -m bench.latency.filtered [--size 100000] [--sessions 100] [--queries 100] [--runs 3]
                                     [--fillers 20] [--database-url URL] [--schema NAME]
                                     [--with-embedder] [--compare PACKAGE]

Data: ``bench/latency/data.py`` with ``sessions`` (one agent of ``--size`` facts among
``--fillers`` agents of 1k): turn ``j`` in session ``s{j % sessions}``, metadata ``channel``
slack/email (half each) and ``tier`` gold (1 in 50), each fact drawn from one turn.

Contenders, interleaved in every run (the order rotates), same queries, same process:
- ``unfiltered``: ``Retriever.retrieve`` with no narrowing (the statements as before);
- ``session``: narrowed to one session of ``--sessions`` (a different one per query; ~1 % of
  the turns — selective: exact nearest rows over the passing rows);
- ``metadata-broad``: ``{"channel": "slack"}`` (half of the turns — the per-row probe, HNSW);
- ``metadata-rare``: ``{"tier": "gold"}`` (2 % of the turns, through the metadata GIN index; all
  of them in two sessions);
- ``metadata-rare-spread``: ``{"region": "eu"}`` (~2 % of the turns, spread over every session);
- ``session+metadata``: one session AND ``{"channel": "slack"}``;
- ``metadata-in``: ``{"channel": {"in": ["slack", "fax"]}}`` (half, as an ``in``: an OR of
  containments of the facts' scope copy, ``MetadataFilter.branches``);
- ``metadata-or``: ``{"OR": [{"tier": "gold"}, {"region": "eu"}]}`` (~4 %, two rare values);
- ``3 sessions`` / ``10 sessions``: a list of sessions (Mem0's ``run_id`` ``in`` a list; ~3 % and
  ~10 % of the turns — between the selective and the broad forms).

Printed: each contender's median over runs of p50 / p95 (ms) and the median over runs of its
p50 ratio to ``unfiltered`` measured in the same run. ``--compare oldengramdb.services.retrieve``
(an earlier commit exported under another name, as ``bench.latency.identity`` says): every
contender also through that package's ``Retriever`` on the same pool and workers, interleaved
in each run, its ratios against its own ``unfiltered`` — the box's drift between two
invocations was larger than the changes measured. The goal: every ratio <= 1.0. Without
``--with-embedder`` the query vector is precomputed (the database work is what a filter
changes; the embedding is the same for every contender).
"""

from __future__ import annotations

import argparse
import importlib
import os
import statistics
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402
from psycopg_pool import ConnectionPool  # noqa: E402

from bench.latency.data import DIM, entity_names, load_schema, unit, update_schema  # noqa: E402
from bench.latency.report import percentile  # noqa: E402
from bench.latency.retrieve import InLoopEmbedder, load_model, load_text, queries_for  # noqa: E402
from bench.shared.throwaway_db import database_url  # noqa: E402
from engramdb.infra.read_pool import open_worker_pool  # noqa: E402
from engramdb.services.retrieve import Retriever  # noqa: E402
from engramdb.services.retrieve.scope import RetrieveFilter  # noqa: E402

Within = Callable[[int], RetrieveFilter | None]


def contenders(sessions: int) -> dict[str, Within]:
    return {
        "unfiltered": lambda i: None,
        "session": lambda i: RetrieveFilter.of(f"s{(i * 37) % sessions}"),
        "metadata-broad": lambda i: RetrieveFilter.of(metadata={"channel": "slack"}),
        "metadata-rare": lambda i: RetrieveFilter.of(metadata={"tier": "gold"}),
        "metadata-rare-spread": lambda i: RetrieveFilter.of(metadata={"region": "eu"}),
        "session+metadata": lambda i: RetrieveFilter.of(f"s{(i * 37) % sessions}", {"channel": "slack"}),
        "metadata-in": lambda i: RetrieveFilter.of(metadata={"channel": {"in": ["slack", "fax"]}}),
        "metadata-or": lambda i: RetrieveFilter.of(metadata={"OR": [{"tier": "gold"}, {"region": "eu"}]}),
        "3 sessions": lambda i: RetrieveFilter.of([f"s{(i * 37 + k) % sessions}" for k in range(3)]),
        "10 sessions": lambda i: RetrieveFilter.of([f"s{(i * 37 + k) % sessions}" for k in range(10)]),
    }


def run_once(retriever: Retriever, agent: str, queries: list[str], within: Within) -> tuple[list[float], int]:
    """Each query's duration (ms) and how many returned nothing."""
    out, empty = [], 0
    for i, text in enumerate(queries):
        result = retriever.retrieve(agent, text, within=within(i))
        out.append(result.duration_ms)
        empty += not result.facts and not result.events
    return out, empty


def measure(retriever: Retriever, agent: str, queries: list[str], sessions: int, runs: int,
            other: Any = None) -> dict[str, Any]:
    named: dict[str, tuple[Any, Within]] = {label: (retriever, within) for label, within in contenders(sessions).items()}
    if other is not None:
        named |= {f"{label} (other)": (other, within) for label, within in contenders(sessions).items()}
    for who, within in named.values():  # warm-up: caches, prepared statements, pools
        run_once(who, agent, queries[:10], within)
    p50s: dict[str, list[float]] = {k: [] for k in named}
    p95s: dict[str, list[float]] = {k: [] for k in named}
    ratios: dict[str, list[float]] = {k: [] for k in named}
    empties: dict[str, int] = dict.fromkeys(named, 0)
    labels = list(named)
    for r in range(runs):
        this: dict[str, float] = {}
        for label in labels[r % len(labels):] + labels[: r % len(labels)]:
            who, within = named[label]
            times, empty = run_once(who, agent, queries, within)
            this[label] = percentile(times, 50)
            p50s[label].append(this[label])
            p95s[label].append(percentile(times, 95))
            empties[label] += empty
        for label in labels:
            base = "unfiltered (other)" if label.endswith(" (other)") else "unfiltered"
            ratios[label].append(this[label] / this[base])
    return {label: {"p50": statistics.median(p50s[label]), "p95": statistics.median(p95s[label]),
                    "p50_runs": p50s[label], "ratio_p50": statistics.median(ratios[label]),
                    "empty": empties[label] / runs}
            for label in labels}


@dataclass
class BenchData:
    """The loaded (or reused) schema of one run and what the queries are drawn from."""

    url: str
    schema: str
    agent: str
    names: dict[str, list[str]]
    vocab: list[str]
    centroids: Any


@contextmanager
def bench_data(args: argparse.Namespace, prefix: str) -> Iterator[BenchData]:
    """The data of ``args`` (``--size``, ``--sessions``, ``--fillers``, ``--database-url``,
    ``--schema``): ``--schema`` is reused when it exists and always kept; otherwise a new
    schema named ``prefix_…`` is loaded and dropped at the end. Shared by this bench and
    ``bench.latency.filtered_lists``, so both measure the same rows."""
    rng = np.random.default_rng(7)
    vocab = [f"w{i:04d}x" for i in range(2000)]
    centroids = unit(rng.normal(size=(400, DIM)).astype(np.float32))
    schema = args.schema or f"{prefix}_{uuid.uuid4().hex[:8]}"
    agent = f"bench-{args.size}"
    with database_url(args.database_url) as url:
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
            if exists:
                names = {agent: entity_names(args.size, vocab)}
                print(f"reusing schema {schema}")
                update_schema(url, schema)
            else:
                names = load_schema(url, schema, [args.size], args.fillers, rng, centroids, vocab,
                                    sessions=args.sessions)
            yield BenchData(url, schema, agent, names, vocab, centroids)
        finally:
            if not args.schema:
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def add_data_arguments(ap: argparse.ArgumentParser) -> None:
    """The options ``bench_data`` reads (and ``--runs``), shared with ``filtered_lists``."""
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--fillers", type=int, default=20)
    ap.add_argument("--database-url", default=os.environ.get("ENGRAMDB_BENCH_DATABASE_URL"))
    ap.add_argument("--schema", help="schema name; reused (no load) when it already holds the data; kept")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_data_arguments(ap)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--with-embedder", action="store_true", help="embed each query with the offline model too")
    ap.add_argument("--compare", help="importable package with another Retriever to measure alongside")
    args = ap.parse_args(argv)
    with bench_data(args, "bench_flt") as data:
        url, schema, agent = data.url, data.schema, data.agent
        embedder = InLoopEmbedder(load_model(not args.with_embedder))
        pool = ConnectionPool(url, min_size=6, max_size=8,
                              kwargs={"options": f"-c search_path={schema},public"})
        pool.wait()
        workers = open_worker_pool(url, schema)
        retriever = Retriever(pool, embedder, worker_pool=workers)
        other = (importlib.import_module(args.compare).Retriever(pool, embedder, worker_pool=workers)
                 if args.compare else None)
        queries = queries_for(args.size, args.queries, data.names[agent], data.vocab, data.centroids, embedder)
        before = load_text()
        got = measure(retriever, agent, queries, args.sessions, args.runs, other)
        print(f"\nfiltered vs unfiltered retrieve, {args.size} facts ({args.sessions} sessions, "
              f"+{args.fillers} agents of 1k), {args.runs} runs x {args.queries} queries, "
              f"{'WITH' if embedder.model is not None else 'without'} the query embedding")
        print(f"{'contender':<29} {'p50 ms':>8} {'p95 ms':>8} {'x unfiltered p50':>17} {'empty':>6}  p50 per run")
        for label, s in got.items():
            runs_txt = " ".join(f"{v:.1f}" for v in s["p50_runs"])
            print(f"{label:<29} {s['p50']:8.1f} {s['p95']:8.1f} {s['ratio_p50']:17.2f} "
                  f"{s['empty']:6.1f}  {runs_txt}")
        print(f"{before} before, {load_text()} after")
        retriever.close()
        if other is not None:
            other.close()
        workers.close()
        pool.close()

if __name__ == "__main__":
    main()
