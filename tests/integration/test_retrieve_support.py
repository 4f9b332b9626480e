"""Shared helpers for the retrieve tests (no tests here).

Read-model rows are inserted directly into the projection tables of a fresh schema
(``projections.schema.read_model_ddl`` + ``vector_index_ddl``), so these tests exercise
the read pipeline against real PostgreSQL + pgvector without depending on the write path.
Embeddings come from ``HashEmbedder`` (an honest bag-of-words test double, see its module)
and the reranker from ``ScriptedLLM`` answering from a table keyed by item text.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg_pool import ConnectionPool

from engramdb.domain.keys import match_key
from engramdb.infra.pgsql import vector_literal
from engramdb.infra.providers.scripted import HashEmbedder, ScriptedLLM
from engramdb.projections.schema import read_model_ddl, vector_index_ddl
from engramdb.services.retrieve import Retriever

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
EMBEDDER = HashEmbedder(384)


def create_read_models(url: str, schema: str) -> None:
    """Tables + HNSW indexes in ``schema``; trigram statements only if pg_trgm exists."""
    with psycopg.connect(url, autocommit=True) as conn:
        trgm = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm'").fetchone()
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(schema)))
        for stmt in read_model_ddl(384) + vector_index_ddl():
            if "CREATE EXTENSION" in stmt or (not trgm and "trgm" in stmt):
                continue
            conn.execute(stmt)


def make_pool(url: str, schema: str, max_size: int = 6) -> ConnectionPool:
    pool = ConnectionPool(
        url,
        min_size=1,
        max_size=max_size,
        kwargs={"options": f"-c search_path={schema},public"},
        open=True,
    )
    pool.wait()
    return pool


@dataclass
class Store:
    """Writes read-model rows for tests (what the projectors would have written)."""

    pool: ConnectionPool
    schema: str
    embedder: HashEmbedder = field(default_factory=lambda: EMBEDDER)
    _message_cols: set[str] | None = None

    def _exec(self, query: str, params: Sequence[Any] | Mapping[str, Any]) -> None:
        with self.pool.connection() as conn:
            conn.execute(query, params)

    def vec(self, text: str) -> str:
        return vector_literal(self.embedder.embed([text])[0])

    def entity(self, agent: str, key: str, name: str, aliases: Sequence[str] = (), merged_into: str | None = None) -> None:
        self._exec(
            "INSERT INTO mem_entities (agent_id, entity_key, display_name, entity_type, merged_into, created_at)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (agent, key, name, key.split(":", 1)[0], merged_into, T0 - timedelta(days=60)),
        )
        for alias in {name, *aliases}:
            self._exec(
                "INSERT INTO mem_aliases (agent_id, alias_folded, alias, entity_key) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                (agent, match_key(alias), alias, key),
            )

    def relationship(self, agent: str, source: str, target: str, relation: str, strength: float = 1.0,
                     seen: datetime = T0) -> None:
        self._exec(
            "INSERT INTO mem_relationships (agent_id, source_key, target_key, relation_type, strength, first_seen_at, last_seen_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (agent, source, target, relation, strength, seen - timedelta(days=30), seen),
        )

    def fact(
        self,
        agent: str,
        fact_id: str,
        entity_key: str,
        text: str,
        *,
        links: Sequence[str] = (),
        confidence: float = 0.95,
        importance: float = 0.5,
        reinforcement: int = 0,
        valid_from: datetime = T0,
        recorded_at: datetime | None = None,
        valid_to: datetime | None = None,
        invalidated_at: datetime | None = None,
        status: str = "active",
        source_message_id: str | None = None,
    ) -> None:
        self._exec(
            """INSERT INTO mem_facts (agent_id, fact_id, entity_key, fact_text, confidence, importance,
                   reinforcement_count, valid_from, valid_to, recorded_at, invalidated_at, status,
                   source_message_id, source_message_ids, embedding)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::vector)""",
            (agent, fact_id, entity_key, text, confidence, importance, reinforcement, valid_from, valid_to,
             recorded_at or valid_from, invalidated_at, status, source_message_id,
             [source_message_id] if source_message_id else [], self.vec(text)),
        )
        for key in dict.fromkeys([entity_key, *links]):
            self._exec(
                "INSERT INTO mem_fact_entities (agent_id, fact_id, entity_key, is_primary) VALUES (%s, %s, %s, %s)",
                (agent, fact_id, key, key == entity_key),
            )

    def message(self, agent: str, message_id: str, text: str, occurred_at: datetime = T0, speaker: str | None = "user",
                session_id: str = "s1", recorded_at: datetime | None = None) -> None:
        if self._message_cols is None:
            with self.pool.connection() as conn:
                self._message_cols = {r[0] for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = 'mem_messages'",
                    (self.schema,)).fetchall()}
        cols = ["agent_id", "message_id", "session_id", "speaker", "text", "occurred_at", "recorded_at", "embedding"]
        vals: list[Any] = [agent, message_id, session_id, speaker, text, occurred_at, recorded_at or occurred_at,
                           self.vec(text)]
        if "record_id" in self._message_cols:  # additive column of the conversation projection
            cols.append("record_id")
            vals.append(uuid.uuid4())
        marks = ", ".join("%s::vector" if c == "embedding" else "%s" for c in cols)
        self._exec(f"INSERT INTO mem_messages ({', '.join(cols)}) VALUES ({marks})", vals)

    def pattern(self, agent: str, pattern_id: str, text: str, support: Sequence[str], confidence: float = 0.8) -> None:
        self._exec(
            "INSERT INTO mem_patterns (agent_id, pattern_id, pattern_text, supporting_fact_ids, confidence, recorded_at)"
            " VALUES (%s, %s, %s, %s, %s, %s)",
            (agent, pattern_id, text, list(support), confidence, T0),
        )


@pytest.fixture
def store(pg_url: str, fresh_schema: Any) -> Iterator[Store]:
    schema, _env = fresh_schema("rt")
    create_read_models(pg_url, schema)
    pool = make_pool(pg_url, schema)
    try:
        yield Store(pool, schema)
    finally:
        pool.close()


@pytest.fixture
def retriever(store: Store) -> Iterator[Retriever]:
    with Retriever(store.pool, EMBEDDER) as r:
        yield r


# ----- the spec's worked examples (docs/spec.md §3, docs/spec-original/read-pipeline.pt.txt) -------------------------

MARCOS = "person:marcos-tavares"
CAROLINA = "person:carolina"
VERTIX = "organization:vertix"
BRUNO = "person:bruno-almeida"


def load_worked_examples(s: Store, agent: str) -> None:
    day = timedelta(days=1)
    s.entity(agent, MARCOS, "Marcos Tavares", aliases=["Marcos"])
    s.entity(agent, CAROLINA, "Carolina", aliases=["Carol"])
    s.entity(agent, VERTIX, "Vertix")
    s.entity(agent, "person:clara-rezende", "Clara Rezende", aliases=["Clara"])
    s.entity(agent, "person:ricardo-gomes", "Ricardo Gomes")
    s.entity(agent, "organization:ambev", "Ambev")
    s.entity(agent, "place:porto-alegre", "Porto Alegre")
    s.entity(agent, BRUNO, "Bruno Almeida", aliases=["Bruno"])
    s.entity(agent, "organization:orion-tech", "Orion Tech")
    s.relationship(agent, MARCOS, CAROLINA, "married_to", 2.0)
    s.relationship(agent, MARCOS, VERTIX, "works_at")
    s.relationship(agent, MARCOS, "place:porto-alegre", "lives_in")
    s.relationship(agent, "person:clara-rezende", VERTIX, "worked_at")
    s.relationship(agent, "person:ricardo-gomes", VERTIX, "co_founder_of")
    s.relationship(agent, VERTIX, "organization:ambev", "client_of")
    s.relationship(agent, BRUNO, "organization:orion-tech", "works_at")
    s.fact(agent, "f_marcos_home", MARCOS, "Marcos Tavares lives in Porto Alegre", links=["place:porto-alegre"], valid_from=T0 - 3 * day)
    s.fact(agent, "f_marcos_job", MARCOS, "Marcos Tavares is a product manager at Vertix", links=[VERTIX], valid_from=T0 - 10 * day)
    s.fact(agent, "f_marcos_wife", MARCOS, "Marcos Tavares is married to Carolina", links=[CAROLINA], valid_from=T0 - 20 * day)
    s.fact(agent, "f_carol_job", CAROLINA, "Carolina is an architect", valid_from=T0 - 20 * day)
    s.fact(agent, "f_clara_left", "person:clara-rezende", "Clara Rezende left Vertix", links=[VERTIX], valid_from=T0 - 5 * day)
    s.fact(agent, "f_vertix_seriesa", VERTIX, "Vertix received a Series A of R$ 20M", valid_from=T0 - 8 * day)
    # mentions Vertix only through the link table: only the graph signal can find it
    s.fact(agent, "f_ricardo_cofounder", "person:ricardo-gomes", "Ricardo Gomes co-founded the startup", links=[VERTIX], valid_from=T0 - 40 * day)
    s.fact(agent, "f_vertix_ambev", VERTIX, "Vertix signed a contract with Ambev", links=["organization:ambev"], valid_from=T0 - 2 * day)
    s.fact(agent, "f_bruno_marathon", BRUNO, "Bruno Almeida runs marathons", valid_from=T0 - 6 * day)
    s.fact(agent, "f_bruno_ml", BRUNO, "Bruno Almeida developed an ML model for fraud detection", valid_from=T0 - 7 * day)
    s.fact(agent, "f_bruno_job", BRUNO, "Bruno Almeida works at Orion Tech", links=["organization:orion-tech"], valid_from=T0 - 9 * day)
    s.message(agent, "m_bruno", "Bruno Almeida ran another marathon this weekend, his team of runners cheered", T0 - 6 * day)
    s.message(agent, "m_marcos", "Marcos Tavares told me he moved to Porto Alegre with Carolina", T0 - 3 * day)
    s.message(agent, "m_latest", "Nothing much happened today", T0)


_ITEM = re.compile(r"^\[(\d+)\] (.*)$", re.M)


def judge(table: Mapping[str, float], default: float = 0.0) -> ScriptedLLM:
    """TEST DOUBLE reranker: scores each listed item from ``table`` (keyed by item text),
    ``default`` for anything else. Deterministic; it reads the prompt, it does not think."""

    def answer(messages: Sequence[dict[str, Any]]) -> str:
        import json

        user = messages[-1]["content"]
        items = user.split("Items:", 1)[1]
        scores = {n: table.get(text.strip(), default) for n, text in _ITEM.findall(items)}
        return json.dumps({"scores": scores})

    return ScriptedLLM(answer, name="scripted-judge")
