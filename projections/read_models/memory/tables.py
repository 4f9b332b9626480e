"""The ``memory`` read model's tables: agents, facts, the entity graph, rejections.

Temporal columns on facts (bi-temporal, ADR-0005):
- valid time: ``valid_from`` (the message's ``occurred_at``), ``valid_to`` (the occurred_at
  of the message that superseded/retracted it; NULL = active);
- transaction time: ``recorded_at`` (event timestamp of the decision that created it),
  ``invalidated_at`` (event timestamp of the decision that ended it).

``mem_facts`` rows are ``domain.fold.FactRow``s (the reference model) plus the vector:
``fact_values`` turns one into the column values both the projector and rebuild write
(``tests/integration/test_read_models.py`` checks the columns and ``FactRow``'s fields are the same set).
"""

from __future__ import annotations

from typing import Any

from engramdb.domain.aggregate import CLIENT_VALID_TO, REPROCESSED
from engramdb.domain.fold import FactRow
from engramdb.projections.read_model import jsonb
from engramdb.projections.read_models.patterns import PATTERNS
from engramdb.projections.scope_keys import SCOPE_KEYS_FUNCTION, SCOPE_KEYS_INDEX
from engramdb.projections.search import SEARCH_FUNCTIONS, search_columns, search_index, stats_index
from engramdb.projections.tables import EMBEDDING, VECTOR, Table

# agent aggregate id -> agent_id: agent events carry only their originator id
AGENTS = Table(
    "mem_agents",
    columns=(
        ("aggregate_id", "uuid"),
        ("agent_id", "text NOT NULL"),
        ("opened_at", "timestamptz NOT NULL"),
    ),
    primary_key=("aggregate_id",),
)

FACTS = Table(
    "mem_facts",
    columns=(
        ("agent_id", "text NOT NULL"),
        ("fact_id", "text NOT NULL"),
        ("entity_key", "text NOT NULL"),
        ("attribute_key", "text"),
        ("fact_text", "text NOT NULL"),
        ("category", "text NOT NULL DEFAULT 'general'"),
        ("confidence", "real NOT NULL"),
        ("importance", "real NOT NULL DEFAULT 0.5"),
        ("reinforcement_count", "integer NOT NULL DEFAULT 0"),
        ("valid_from", "timestamptz NOT NULL"),
        ("valid_to", "timestamptz"),
        ("recorded_at", "timestamptz NOT NULL"),
        ("invalidated_at", "timestamptz"),
        ("status", "text NOT NULL DEFAULT 'active'"),
        ("supersedes_fact_id", "text"),
        ("superseded_by", "text"),
        ("source_message_id", "text"),
        ("source_message_ids", "text[] NOT NULL DEFAULT '{}'"),
        ("speaker", "text"),
        ("decided_by", "jsonb NOT NULL DEFAULT '{}'::jsonb"),
        ("last_confirmed_at", "timestamptz"),
        # stays 0: usage counted by the jobs is in ``mem_fact_usage`` (ADR-0019)
        ("times_retrieved", "integer NOT NULL DEFAULT 0"),
        ("event_versions", "integer[] NOT NULL DEFAULT '{}'"),
        (EMBEDDING, VECTOR),
        # ADR-0019: the fact is the user's correction of another (``CorrectionNoted``)
        ("is_correction", "boolean NOT NULL DEFAULT false"),
        # the source turns' scopes (``SOURCE_SCOPE``): facts filtered by session or metadata
        # without joining ``mem_messages`` (ADR-0047)
        ("source_scope", "jsonb NOT NULL DEFAULT '[]'::jsonb"),
    ),
    added=("is_correction", "source_scope"),
    primary_key=("agent_id", "fact_id"),
    indexes=(
        "CREATE INDEX IF NOT EXISTS mem_facts_active ON mem_facts (agent_id, entity_key) "
        "WHERE valid_to IS NULL",
        "CREATE INDEX IF NOT EXISTS mem_facts_time ON mem_facts (agent_id, valid_from)",
        # list_facts' keyset order (API, CLI, inspector) and the as-of pages (ADR-0044)
        "CREATE INDEX IF NOT EXISTS mem_facts_recorded ON mem_facts "
        "(agent_id, recorded_at, fact_id)",
        # the context's "Directives" section reads them on every retrieve (ADR-0045): a
        # partial index holds only directive facts, so the read is one tiny probe
        "CREATE INDEX IF NOT EXISTS mem_facts_directives ON mem_facts (agent_id, recorded_at) "
        "WHERE category = 'directive'",
        # keyword search: the embedded PostgreSQL has no contrib (no pg_trgm), so a language-
        # neutral ('simple') tsvector GIN index finds candidate rows by word; see ADR-0006
        "CREATE INDEX IF NOT EXISTS mem_facts_text_tsv ON mem_facts "
        "USING gin (to_tsvector('simple', fact_text))",
        search_index("mem_facts"),
        # a retrieve narrowed to few turns (a session, ADR-0047) finds their facts by source
        "CREATE INDEX IF NOT EXISTS mem_facts_sources ON mem_facts USING gin (source_message_ids)",
        "CREATE INDEX IF NOT EXISTS mem_facts_scope ON mem_facts "
        "USING gin (source_scope jsonb_path_ops)",
        SCOPE_KEYS_INDEX,  # the same facts by exact keys, when a filter has them
        stats_index("mem_facts", "fact_id",
                    ("confidence", "valid_from", "valid_to", "recorded_at", "invalidated_at")),
    ),
    embedded_text="fact_text",
    # BM25 (projections/search.py): the entity's name ('person:melanie' -> 'melanie') is
    # searchable with the fact's text
    generated=search_columns(
        "replace(split_part(entity_key, ':', 2), '-', ' ') || ' ' || fact_text"),
    functions=(*SEARCH_FUNCTIONS, SCOPE_KEYS_FUNCTION),
)

ENTITIES = Table(
    "mem_entities",
    columns=(
        ("agent_id", "text NOT NULL"),
        ("entity_key", "text NOT NULL"),
        ("display_name", "text NOT NULL"),
        ("entity_type", "text NOT NULL"),
        ("profile_text", "text NOT NULL DEFAULT ''"),
        ("merged_into", "text"),
        ("created_at", "timestamptz NOT NULL"),
        ("importance", "real NOT NULL DEFAULT 0.5"),  # ADR-0019: ImportanceAssessed
        # ADR-0022: ProfileRefreshed (profile_text's author and the memory time it was made)
        ("profile_method", "text"),
        ("profile_refreshed_at", "timestamptz"),
    ),
    primary_key=("agent_id", "entity_key"),
    added=("importance", "profile_method", "profile_refreshed_at"),
)

ALIASES = Table(
    "mem_aliases",
    columns=(
        ("agent_id", "text NOT NULL"),
        ("alias_folded", "text NOT NULL"),
        ("alias", "text NOT NULL"),
        ("entity_key", "text NOT NULL"),
    ),
    primary_key=("agent_id", "alias_folded"),
    indexes=(
        "CREATE INDEX IF NOT EXISTS mem_aliases_entity ON mem_aliases (agent_id, entity_key)",
    ),
)

RELATIONSHIPS = Table(
    "mem_relationships",
    columns=(
        ("agent_id", "text NOT NULL"),
        ("source_key", "text NOT NULL"),
        ("target_key", "text NOT NULL"),
        ("relation_type", "text NOT NULL"),
        ("strength", "real NOT NULL DEFAULT 1.0"),
        ("mentions", "integer NOT NULL DEFAULT 1"),
        ("first_seen_at", "timestamptz NOT NULL"),
        ("last_seen_at", "timestamptz NOT NULL"),
    ),
    primary_key=("agent_id", "source_key", "target_key", "relation_type"),
    indexes=(
        "CREATE INDEX IF NOT EXISTS mem_relationships_target "
        "ON mem_relationships (agent_id, target_key)",
    ),
)

FACT_ENTITIES = Table(
    "mem_fact_entities",
    columns=(
        ("agent_id", "text NOT NULL"),
        ("fact_id", "text NOT NULL"),
        ("entity_key", "text NOT NULL"),
        ("is_primary", "boolean NOT NULL"),
    ),
    primary_key=("agent_id", "fact_id", "entity_key"),
    indexes=(
        "CREATE INDEX IF NOT EXISTS mem_fact_entities_entity "
        "ON mem_fact_entities (agent_id, entity_key)",
    ),
)

# audit of refused decisions
REJECTIONS = Table(
    "mem_rejections",
    columns=(
        ("agent_id", "text NOT NULL"),
        ("message_id", "text"),
        ("reason", "text NOT NULL"),
        ("decision", "jsonb NOT NULL"),
        ("recorded_at", "timestamptz NOT NULL"),
        ("event_version", "integer NOT NULL"),
    ),
    primary_key=("agent_id", "event_version"),
)

# Turns hidden from retrieval's "Relevant conversations" (ADR-0016): the source turns of a
# retracted fact. Kept here, not in ``conversation``, because only this model's events
# (``FactRetracted``) and state (a fact's sources) decide it; retrieval joins it by key.
HIDDEN_MESSAGES = Table(
    "mem_hidden_messages",
    columns=(
        ("agent_id", "text NOT NULL"),
        ("message_id", "text NOT NULL"),
        ("hidden_at", "timestamptz NOT NULL"),
        ("fact_id", "text NOT NULL"),
    ),
    primary_key=("agent_id", "message_id"),
)

# "Forget agent A" (``Forgotten``): every turn of A recorded up to ``forgotten_at`` is hidden.
FORGOTTEN = Table(
    "mem_forgotten",
    columns=(
        ("agent_id", "text NOT NULL"),
        ("event_version", "integer NOT NULL"),
        ("forgotten_at", "timestamptz NOT NULL"),
    ),
    primary_key=("agent_id", "event_version"),
)

# What the sleep-time jobs learnt about a fact (ADR-0019): apart from ``mem_facts`` because a
# job touches thousands of rows at once, and updating a ``mem_facts`` row re-inserts it into
# the HNSW index (measured: 13 s per 10k rows); these narrow rows update in milliseconds.
# ``importance`` NULL = never assessed (retrieval falls back to ``mem_facts.importance``).
FACT_USAGE = Table(
    "mem_fact_usage",
    columns=(
        ("agent_id", "text NOT NULL"),
        ("fact_id", "text NOT NULL"),
        ("importance", "real"),
        ("times_retrieved", "integer NOT NULL DEFAULT 0"),
        ("last_retrieved_at", "timestamptz"),
        # ADR-0022: FactVitalityAssessed (NULL = never assessed)
        ("vitality", "real"),
        ("low_vitality", "boolean NOT NULL DEFAULT false"),
    ),
    primary_key=("agent_id", "fact_id"),
    added=("vitality", "low_vitality"),
)

# Communities of the entity graph (ADR-0022, ``CommunityDetected``/``CommunityDissolved``);
# the planner finds a seed's community by ``members && ARRAY[seed]`` (GIN).
COMMUNITIES = Table(
    "mem_communities",
    columns=(
        ("agent_id", "text NOT NULL"),
        ("community_id", "text NOT NULL"),
        ("members", "text[] NOT NULL"),
        ("label", "text NOT NULL"),
        ("method", "text NOT NULL"),
        ("detected_at", "timestamptz NOT NULL"),
    ),
    primary_key=("agent_id", "community_id"),
    indexes=(
        "CREATE INDEX IF NOT EXISTS mem_communities_members ON mem_communities "
        "USING gin (members)",
    ),
)

# ``source_scope`` of the fact(s) whose agent and source ids are the SQL ``{agent}`` and
# ``{ids}`` (text[]): the scopes of the known source turns, in source order, unknown skipped.
# The one definition the inserts, the fix-ups and the backfill all use.
SOURCE_SCOPE = (
    "(SELECT coalesce(jsonb_agg(t.scope ORDER BY s.i), '[]'::jsonb) "
    "FROM unnest({ids}) WITH ORDINALITY s(id, i) "
    "JOIN mem_turn_scopes t ON t.agent_id = {agent} AND t.message_id = s.id)"
)
# ... for the ``mem_facts`` row aliased ``f``
FACT_SOURCE_SCOPE = SOURCE_SCOPE.format(agent="f.agent_id", ids="f.source_message_ids")

# A database whose facts predate ``source_scope``: copy the turns' scopes from the
# conversation model once, then fill the column. Only when this model has no turn yet,
# ``mem_messages`` exists (a fresh database has none: it is referenced only past that check,
# as PL/pgSQL plans a statement when it first runs it) and some fact with sources has no
# scope: a few probes otherwise. Schema setup only (``Table.backfills``): a rebuild's shadow
# is built from the log.
SCOPE_BACKFILL = (
    "DO $$ DECLARE copied bigint; BEGIN "
    "IF EXISTS (SELECT 1 FROM mem_turn_scopes) OR to_regclass('mem_messages') IS NULL "
    "THEN RETURN; END IF; "
    "IF NOT EXISTS (SELECT 1 FROM mem_facts WHERE source_message_ids <> '{}' "
    "AND source_scope = '[]'::jsonb) THEN RETURN; END IF; "
    "INSERT INTO mem_turn_scopes (agent_id, message_id, scope) "
    "SELECT agent_id, message_id, jsonb_build_object('s', session_id, 'm', metadata) "
    "FROM mem_messages ON CONFLICT DO NOTHING; "
    "GET DIAGNOSTICS copied = ROW_COUNT; "
    "IF copied > 0 THEN "
    f"UPDATE mem_facts f SET source_scope = {FACT_SOURCE_SCOPE} "
    "WHERE f.source_message_ids <> '{}'; "
    "END IF; END $$"
)

# The scope of every turn this model has seen (``MessageRecord.Recorded``), kept here and
# not read from ``mem_messages``: projectors advance independently, so a fact's scope must
# not depend on how far the conversation projector got. Turns are immutable.
TURN_SCOPES = Table(
    "mem_turn_scopes",
    columns=(
        ("agent_id", "text NOT NULL"),
        ("message_id", "text NOT NULL"),
        ("scope", "jsonb NOT NULL"),
    ),
    primary_key=("agent_id", "message_id"),
    backfills=(SCOPE_BACKFILL,),
)

TABLES = (AGENTS, FACTS, TURN_SCOPES, FACT_USAGE, PATTERNS, ENTITIES, ALIASES, RELATIONSHIPS, FACT_ENTITIES, REJECTIONS,
          HIDDEN_MESSAGES, FORGOTTEN, COMMUNITIES)

def fact_values(row: FactRow) -> dict[str, Any]:
    """Column values of one ``mem_facts`` row (jsonb adapted), keyed by column."""
    values = dict(vars(row))
    values["decided_by"] = jsonb(row.decided_by)
    values["source_scope"] = jsonb(row.source_scope)
    return values


def turn_scope(e: Any) -> dict[str, Any]:
    """A ``MessageRecord.Recorded``'s scope: what ``jsonb_build_object('s', session_id, 'm',
    metadata)`` gives over its ``mem_messages`` row (a missing metadata stored as {})."""
    return {"s": e.session_id, "m": e.metadata if e.metadata is not None else {}}


def relationship_strength(mentions: int) -> float:
    """1 - 0.5^mentions: 0.5 at first sight, saturating at 1 (same formula in SQL)."""
    return 1.0 - 0.5 ** int(mentions)


def merge_relationship_rows(
    rows: list[Any], merged_key: str, into_key: str
) -> dict[tuple[str, str, str], tuple[int, Any, Any]]:
    """Re-point relationship rows of a merged entity; self-loops vanish, duplicates add up."""
    out: dict[tuple[str, str, str], tuple[int, Any, Any]] = {}
    for row in rows:
        source = into_key if row["source_key"] == merged_key else row["source_key"]
        target = into_key if row["target_key"] == merged_key else row["target_key"]
        if source == target:
            continue
        key = (source, target, row["relation_type"])
        mentions, first, last = row["mentions"], row["first_seen_at"], row["last_seen_at"]
        if key in out:
            m0, f0, l0 = out[key]
            mentions, first, last = m0 + mentions, min(f0, first), max(l0, last)
        out[key] = (mentions, first, last)
    return out


def hidden_message_rows(
    agent: str, e: Any, sources: list[str]
) -> list[tuple[str, str, Any, str]]:
    """Rows a ``FactRetracted`` adds to ``mem_hidden_messages``: the retracted fact's source
    turns, hidden from the retraction's transaction time on (the first hiding wins). None for
    a fact ended by reprocessing its turn (ADR-0023): the turn is re-extracted, not withdrawn;
    none for a client's fact ending at its ``valid_to`` (ADR-0049): it ended, nobody withdrew it."""
    if getattr(e, "reason", None) in (REPROCESSED, CLIENT_VALID_TO):
        return []
    return [(agent, mid, e.timestamp, e.fact_id) for mid in dict.fromkeys(sources)]


def community_row(e: Any) -> tuple[Any, ...]:
    """The ``mem_communities`` row of a ``CommunityDetected`` (columns in order)."""
    return (e.agent_id, e.community_id, list(e.members), e.label, e.method, e.timestamp)


def pattern_row(e: Any) -> tuple[Any, ...]:
    """The ``mem_patterns`` row of a ``PatternObserved`` (columns in ``PATTERNS`` order)."""
    return (e.agent_id, e.pattern_id, e.text, list(e.fact_ids), float(e.confidence),
            e.timestamp, e.kind, e.method, list(e.message_ids))
