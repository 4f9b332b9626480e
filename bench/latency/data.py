"""Synthetic memory for the retrieve latency bench (``bench/latency/retrieve.py``): agents of
N facts shaped like real memory, written with binary COPY, HNSW built after the load.

384-d unit vectors drawn around topic centroids (so a query has genuinely similar facts above
``min_similarity``), fact text made of a subject name plus words from a 2k-word vocabulary
(keyword hits), entities with aliases, relationships and fact<->entity links (graph and
spreading run), and raw messages (the "Relevant conversations" search). Kept apart from the
measuring so each module has one job.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from engramdb.projections.schema import read_model_ddl, vector_index_ddl

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
    sessions: int = 0,
) -> list[str]:
    """Insert ``n`` facts (+ entities, aliases, links, relationships, n/2 messages); returns entity names.

    ``sessions`` > 0 (the filtered-retrieve bench, ``bench/latency/filtered.py``): turn ``j``
    is in session ``s{j % sessions}`` with metadata ``{"channel": slack|email, "tier":
    gold (1 in 50, every 50th turn: all in two sessions)|std, "region": eu (~1 in 50, spread
    over every session)|us}``, fact ``i``'s source is turn ``i // 2``, and message ids are unique
    across agents (as real ones are). 0: the corpus every other bench loads, unchanged."""
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
        mid = (lambda j: f"{agent}:m{j}") if sessions else (lambda j: f"m{j}")
        # the memory projector's copy of the source turn's scope (ADR-0047), as it would write it
        sources = ", source_message_ids, source_scope" if sessions else ""
        with cur.copy(
            "COPY mem_facts (agent_id, fact_id, entity_key, fact_text, confidence, importance,"
            f" reinforcement_count, valid_from, recorded_at, embedding{sources}) FROM STDIN WITH (FORMAT BINARY)"
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
                ] + (["text[]", "jsonb"] if sessions else [])
            )
            for i in range(n):
                text = names[subject[i]] + " " + " ".join(vocab[w] for w in words[i])
                when = T0 - timedelta(days=int(ages[i]))
                fact: tuple[Any, ...] = (
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
                cp.write_row((*fact, [mid(i // 2)], Jsonb([_turn_scope(i // 2, sessions)])) if sessions else fact)
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
        if sessions:
            cols.append("metadata")
            types.append("jsonb")
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
                    mid(i),
                    f"s{i % sessions}" if sessions else "s",
                    "user",
                    names[i % n_entities] + " " + " ".join(vocab[w] for w in mw[i]),
                    when,
                    when,
                    mvec[i],
                ]
                if sessions:
                    row.append(Jsonb(_turn_scope(i, sessions)["m"]))
                if has_record:
                    row.append(uuid.uuid4())
                cp.write_row(row)
        if sessions:
            with cur.copy("COPY mem_turn_scopes (agent_id, message_id, scope) FROM STDIN") as cp:
                for i in range(m):
                    cp.write_row((agent, mid(i), Jsonb(_turn_scope(i, sessions))))
    return names


def _turn_scope(i: int, sessions: int) -> dict[str, Any]:
    """Turn ``i``'s session and metadata, as the memory projector copies them (``{"s", "m"}``)."""
    return {"s": f"s{i % sessions}", "m": {"channel": "slack" if i % 2 else "email",
                                          "tier": "gold" if i % 50 == 7 else "std",
                                          "region": "eu" if _spread(i) < 0.02 else "us"}}


def _spread(i: int) -> float:
    """A uniform number in [0, 1) fixed by ``i`` and not periodic in it (a multiplicative hash):
    a share of turns spread over every session, unlike ``i % 50``, which lands in two."""
    return ((i * 2654435761) % 2**32) / 2**32


def _apply_ddl(conn: psycopg.Connection[Any], schema: str) -> bool:
    """The read models' DDL in ``schema``; whether ``pg_trgm`` is there."""
    conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(schema)))
    trgm = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'").fetchone() is not None
    for stmt in read_model_ddl(DIM):
        if "CREATE EXTENSION" in stmt or (not trgm and "trgm" in stmt):
            continue
        conn.execute(stmt)
    return trgm


def update_schema(url: str, schema: str) -> None:
    """Bring a kept schema to this release's read-model DDL, as a projector's start-up does
    for a deployment (every statement is idempotent; a column added since is computed for the
    existing rows), then ANALYZE: a schema loaded by an older release measures this one."""
    with psycopg.connect(url, autocommit=True) as conn:
        _apply_ddl(conn, schema)
        conn.execute("ANALYZE mem_facts, mem_messages")


def load_schema(
    url: str,
    schema: str,
    sizes: list[int],
    fillers: int,
    rng: np.random.Generator,
    centroids: np.ndarray,
    vocab: list[str],
    sessions: int = 0,
) -> dict[str, list[str]]:
    """Create ``schema`` and load the bench agents (+ ``fillers`` agents of 1k), then HNSW + VACUUM ANALYZE."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        trgm = _apply_ddl(conn, schema)
        start = time.perf_counter()
        names: dict[str, list[str]] = {}
        total = 0
        for size in sizes:
            agent = f"bench-{size}"
            with conn.transaction():
                names[agent] = load_agent(conn, agent, size, rng, centroids, vocab, sessions)
            total += size
        for i in range(fillers):
            with conn.transaction():
                load_agent(conn, f"filler-{i}", 1000, rng, centroids, vocab, sessions)
            total += 1000
        load_s = time.perf_counter() - start
        start = time.perf_counter()
        conn.execute("SET maintenance_work_mem = '1GB'")
        for stmt in vector_index_ddl():
            conn.execute(stmt)
        # VACUUM as autovacuum would in steady state: index-only scans need the visibility map
        conn.execute("VACUUM ANALYZE")
        index_s = time.perf_counter() - start
    print(
        f"loaded {total} facts (+{total // 2} messages) in {load_s:.1f}s; HNSW + VACUUM ANALYZE {index_s:.1f}s"
    )
    print(f"keyword candidates: {'pg_trgm' if trgm else 'to_tsvector GIN (no pg_trgm)'}")
    return names
