"""The read models' tables: the contract between projectors (which write) and the retrieve
service and write pipeline's pre-retrieval (which read).

Every table carries ``agent_id`` first in its key: nothing crosses agents, and every index
leads with it. Vectors are ``vector(d)`` with ``d`` fixed by the embedding model; switching
model means rebuilding the projection (the embedding cache keeps old vectors).

Temporal columns on facts (bi-temporal, ADR-0005):
- valid time: ``valid_from`` (the message's ``occurred_at``), ``valid_to`` (the occurred_at
  of the message that superseded/retracted it; NULL = active);
- transaction time: ``recorded_at`` (event timestamp of the decision that created it),
  ``invalidated_at`` (event timestamp of the decision that ended it).
"""

from __future__ import annotations

import re

FACT_STATUSES = ("active", "superseded", "retracted")


def read_model_ddl(dimensions: int) -> list[str]:
    """CREATE statements for every read model table (idempotent)."""
    d = int(dimensions)
    return [
        "CREATE EXTENSION IF NOT EXISTS vector",
        # raw conversation log
        f"""CREATE TABLE IF NOT EXISTS mem_messages (
            agent_id text NOT NULL,
            message_id text NOT NULL,
            session_id text,
            speaker text,
            text text NOT NULL,
            occurred_at timestamptz NOT NULL,
            recorded_at timestamptz NOT NULL,
            metadata jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            processed boolean NOT NULL DEFAULT false,
            extractor text,
            llm_calls integer NOT NULL DEFAULT 0,
            extraction_error text,
            embedding vector({d}),
            record_id uuid NOT NULL,
            PRIMARY KEY (agent_id, message_id)
        )""",
        "CREATE INDEX IF NOT EXISTS mem_messages_time ON mem_messages (agent_id, occurred_at)",
        # Processed events carry only the MessageRecord's originator id
        "CREATE UNIQUE INDEX IF NOT EXISTS mem_messages_record ON mem_messages (record_id)",
        # agent aggregate id -> agent_id: agent events carry only their originator id
        """CREATE TABLE IF NOT EXISTS mem_agents (
            aggregate_id uuid PRIMARY KEY,
            agent_id text NOT NULL,
            opened_at timestamptz NOT NULL
        )""",
        # facts
        f"""CREATE TABLE IF NOT EXISTS mem_facts (
            agent_id text NOT NULL,
            fact_id text NOT NULL,
            entity_key text NOT NULL,
            attribute_key text,
            fact_text text NOT NULL,
            category text NOT NULL DEFAULT 'general',
            confidence real NOT NULL,
            importance real NOT NULL DEFAULT 0.5,
            reinforcement_count integer NOT NULL DEFAULT 0,
            valid_from timestamptz NOT NULL,
            valid_to timestamptz,
            recorded_at timestamptz NOT NULL,
            invalidated_at timestamptz,
            status text NOT NULL DEFAULT 'active',
            supersedes_fact_id text,
            superseded_by text,
            source_message_id text,
            source_message_ids text[] NOT NULL DEFAULT '{{}}',
            speaker text,
            decided_by jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            last_confirmed_at timestamptz,
            times_retrieved integer NOT NULL DEFAULT 0,
            event_versions integer[] NOT NULL DEFAULT '{{}}',
            embedding vector({d}),
            PRIMARY KEY (agent_id, fact_id)
        )""",
        "CREATE INDEX IF NOT EXISTS mem_facts_active ON mem_facts (agent_id, entity_key) WHERE valid_to IS NULL",
        "CREATE INDEX IF NOT EXISTS mem_facts_time ON mem_facts (agent_id, valid_from)",
        # keyword search: the embedded PostgreSQL has no contrib (no pg_trgm), so a language-
        # neutral ('simple') tsvector GIN index finds candidate rows by word; see ADR-0006
        "CREATE INDEX IF NOT EXISTS mem_facts_text_tsv ON mem_facts "
        "USING gin (to_tsvector('simple', fact_text))",
        "CREATE INDEX IF NOT EXISTS mem_messages_text_tsv ON mem_messages "
        "USING gin (to_tsvector('simple', text))",
        # entity graph
        """CREATE TABLE IF NOT EXISTS mem_entities (
            agent_id text NOT NULL,
            entity_key text NOT NULL,
            display_name text NOT NULL,
            entity_type text NOT NULL,
            profile_text text NOT NULL DEFAULT '',
            merged_into text,
            created_at timestamptz NOT NULL,
            PRIMARY KEY (agent_id, entity_key)
        )""",
        """CREATE TABLE IF NOT EXISTS mem_aliases (
            agent_id text NOT NULL,
            alias_folded text NOT NULL,
            alias text NOT NULL,
            entity_key text NOT NULL,
            PRIMARY KEY (agent_id, alias_folded)
        )""",
        "CREATE INDEX IF NOT EXISTS mem_aliases_entity ON mem_aliases (agent_id, entity_key)",
        """CREATE TABLE IF NOT EXISTS mem_relationships (
            agent_id text NOT NULL,
            source_key text NOT NULL,
            target_key text NOT NULL,
            relation_type text NOT NULL,
            strength real NOT NULL DEFAULT 1.0,
            mentions integer NOT NULL DEFAULT 1,
            first_seen_at timestamptz NOT NULL,
            last_seen_at timestamptz NOT NULL,
            PRIMARY KEY (agent_id, source_key, target_key, relation_type)
        )""",
        "CREATE INDEX IF NOT EXISTS mem_relationships_target ON mem_relationships (agent_id, target_key)",
        """CREATE TABLE IF NOT EXISTS mem_fact_entities (
            agent_id text NOT NULL,
            fact_id text NOT NULL,
            entity_key text NOT NULL,
            is_primary boolean NOT NULL,
            PRIMARY KEY (agent_id, fact_id, entity_key)
        )""",
        "CREATE INDEX IF NOT EXISTS mem_fact_entities_entity ON mem_fact_entities (agent_id, entity_key)",
        # audit of refused decisions
        """CREATE TABLE IF NOT EXISTS mem_rejections (
            agent_id text NOT NULL,
            message_id text,
            reason text NOT NULL,
            decision jsonb NOT NULL,
            recorded_at timestamptz NOT NULL,
            event_version integer NOT NULL,
            PRIMARY KEY (agent_id, event_version)
        )""",
        # patterns / meta-observations (background jobs)
        """CREATE TABLE IF NOT EXISTS mem_patterns (
            agent_id text NOT NULL,
            pattern_id text NOT NULL,
            pattern_text text NOT NULL,
            supporting_fact_ids text[] NOT NULL DEFAULT '{}',
            confidence real NOT NULL DEFAULT 0.5,
            recorded_at timestamptz NOT NULL,
            PRIMARY KEY (agent_id, pattern_id)
        )""",
    ]


def vector_index_ddl() -> list[str]:
    """HNSW indexes, created after the tables (and after bulk loads, when rebuilding)."""
    return [
        "CREATE INDEX IF NOT EXISTS mem_facts_embedding_hnsw ON mem_facts "
        "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)",
        "CREATE INDEX IF NOT EXISTS mem_messages_embedding_hnsw ON mem_messages "
        "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)",
    ]


EMBEDDING_CACHE_DDL = [
    "CREATE EXTENSION IF NOT EXISTS vector",
    """CREATE TABLE IF NOT EXISTS mem_embedding_cache (
        model_id text NOT NULL,
        text_hash text NOT NULL,
        embedding vector NOT NULL,
        PRIMARY KEY (model_id, text_hash)
    )""",
]

READ_MODEL_TABLES = (
    "mem_messages",
    "mem_agents",
    "mem_facts",
    "mem_entities",
    "mem_aliases",
    "mem_relationships",
    "mem_fact_entities",
    "mem_rejections",
    "mem_patterns",
)

# ----- additive (projections helper): which projection owns which table ------------------

CONVERSATION_TABLES = ("mem_messages",)
MEMORY_TABLES = (
    "mem_agents",
    "mem_facts",
    "mem_entities",
    "mem_aliases",
    "mem_relationships",
    "mem_fact_entities",
    "mem_rejections",
)
# projection name -> embedding model its vector columns were built with (rebuild resets it)
READ_MODEL_META_DDL = [
    """CREATE TABLE IF NOT EXISTS mem_read_model_meta (
        projection text PRIMARY KEY,
        embedding_model text NOT NULL,
        dimensions integer NOT NULL,
        built_at timestamptz NOT NULL DEFAULT now()
    )""",
]
_TABLE_OF = re.compile(r"(?:CREATE TABLE IF NOT EXISTS|\bON)\s+(\w+)")


def statement_table(statement: str) -> str | None:
    """The table a CREATE TABLE / CREATE INDEX statement is about (None for extensions)."""
    match = _TABLE_OF.search(statement)
    return match.group(1) if match else None


def ddl_for_tables(
    dimensions: int, tables: tuple[str, ...], *, trigram: bool = True, vector_indexes: bool = True
) -> list[str]:
    """``read_model_ddl`` restricted to ``tables`` (one projection's own tables).

    ``trigram=False`` drops pg_trgm and its GIN indexes (the embedded PostgreSQL 18 build does
    not ship pg_trgm); ``vector_indexes=False`` leaves HNSW out, for bulk loads.
    """
    out: list[str] = []
    for statement in read_model_ddl(dimensions):
        table = statement_table(statement)
        if table is None:
            if "pg_trgm" in statement and not trigram:
                continue
            out.append(statement)
        elif table in tables and (trigram or "gin_trgm_ops" not in statement):
            out.append(statement)
    if vector_indexes:
        out.extend(s for s in vector_index_ddl() if statement_table(s) in tables)
    return out
