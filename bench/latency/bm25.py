"""BM25 signal latency (services/retrieve/signals/bm25.py) at N messages and N facts for one
agent, with as many rows of a second agent in the same tables.

    python -m bench.latency.bm25 [--rows 10000] [--queries 50] [--database-url URL]

Synthetic text: words drawn from a Zipf-like 3k-word vocabulary (so a query mixes words
found in thousands of rows with rare ones), a handful of speakers and entities. Rows are
written with COPY (no vectors: BM25 does not read them). Prints the median / p95 ms of
``bm25_messages`` and ``bm25_facts`` (limit 60) per query kind.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg import sql

from bench.shared.throwaway_db import database_url
from engramdb.projections.read_models.conversation import MESSAGES
from engramdb.projections.schema import read_model_ddl
from engramdb.services.retrieve.signals import bm25_facts, bm25_messages

T0 = datetime(2026, 3, 1, tzinfo=UTC)
SPEAKERS = ["Melanie", "Caroline", "Ana", "Bruno", "João"]


def sentence(rng: random.Random, vocab: list[str], weights: list[float]) -> str:
    return " ".join(rng.choices(vocab, weights, k=rng.randint(6, 24)))


def load(url: str, schema: str, rows: int, rng: random.Random, vocab: list[str],
         weights: list[float]) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(schema)))
        for stmt in read_model_ddl(384):
            if "CREATE EXTENSION" not in stmt and "trgm" not in stmt:
                conn.execute(stmt)
        for agent in ("bench", "other"):
            with conn.cursor() as cur:
                cols = list(MESSAGES.row_columns)
                with cur.copy(sql.SQL("COPY mem_messages ({}) FROM STDIN").format(
                        sql.SQL(", ").join(map(sql.Identifier, cols)))) as copy:
                    for i in range(rows):
                        at = T0 + timedelta(minutes=i)
                        values = {"agent_id": agent, "message_id": f"m{i}", "session_id": "s",
                                  "speaker": rng.choice(SPEAKERS),
                                  "text": sentence(rng, vocab, weights), "occurred_at": at,
                                  "recorded_at": at, "metadata": "{}", "processed": False,
                                  "extractor": None, "llm_calls": 0, "extraction_error": None,
                                  "record_id": uuid.uuid4()}
                        copy.write_row([values[c] for c in cols])
                fcols = ["agent_id", "fact_id", "entity_key", "fact_text", "confidence",
                         "valid_from", "recorded_at"]
                with cur.copy(sql.SQL("COPY mem_facts ({}) FROM STDIN").format(
                        sql.SQL(", ").join(map(sql.Identifier, fcols)))) as copy:
                    for i in range(rows):
                        at = T0 + timedelta(minutes=i)
                        copy.write_row([agent, f"f{i}", f"person:{rng.choice(SPEAKERS).lower()}",
                                        sentence(rng, vocab, weights), 0.9, at, at])
        conn.execute("ANALYZE mem_messages")
        conn.execute("ANALYZE mem_facts")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=10000)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--database-url")
    args = ap.parse_args(argv)
    rng = random.Random(7)
    vocab = [f"word{i}" for i in range(3000)]
    weights = [1.0 / (r + 1) for r in range(len(vocab))]  # Zipf: word0 is in most rows

    schema = f"bench_bm25_{uuid.uuid4().hex[:8]}"
    with database_url(args.database_url, "engramdb-bm25-") as url:
        run(url, schema, args, rng, vocab, weights)


def run(url: str, schema: str, args: argparse.Namespace, rng: random.Random, vocab: list[str],
        weights: list[float]) -> None:
    try:
        started = time.perf_counter()
        load(url, schema, args.rows, rng, vocab, weights)
        print(f"loaded 2 x {args.rows} messages + facts in {time.perf_counter() - started:.1f}s")
        kinds = {
            "common+rare": lambda: f"word{rng.randint(0, 3)} word{rng.randint(1000, 2999)}",
            "5 mixed words": lambda: " ".join(f"word{rng.randint(0, 2999)}" for _ in range(5)),
            "speaker+rare": lambda: f"what did Melanie say about word{rng.randint(500, 2999)}",
        }
        with psycopg.connect(url, options=f"-c search_path={schema},public") as conn:
            for kind, make in kinds.items():
                for name, call in (
                    ("messages", lambda q: bm25_messages(conn, "bench", q, None, 60)),
                    ("facts", lambda q: bm25_facts(conn, "bench", q, None, 0.5, 60)),
                ):
                    times = []
                    for _ in range(args.queries):
                        q = make()
                        t = time.perf_counter()
                        call(q)
                        conn.commit()
                        times.append((time.perf_counter() - t) * 1000)
                    times.sort()
                    p95 = times[int(0.95 * (len(times) - 1))]
                    print(f"{name:9s} {kind:14s} median {statistics.median(times):6.1f} ms"
                          f"  p95 {p95:6.1f} ms")
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
