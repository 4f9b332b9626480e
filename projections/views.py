"""Materialised views of the event log, written exactly once per event.

Each view subclasses eventsourcing's ``PostgresTrackingRecorder``: its tables are created with
the tracking table, and every batch of events (one or more, from ``projections.batching``) is
applied in ONE transaction that records the tracking position of its first event
(``_insert_tracking``, which refuses a position already recorded — a replay), writes the rows
of every event in order, and moves the position to its last event. Rows and position commit
together or not at all, and a replayed event is refused, so counts such as
``reinforcement_count`` are exact. Events a view does not care about still record their
position, so ``wait(position)`` works for any notification id.

Embedders are injected by binding: ``bind_view(MemoryView, embedder)`` returns a subclass
carrying the embedder, because ``ProjectionRunner`` constructs the view from a class.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.persistence import Tracking
from eventsourcing.postgres import PostgresTrackingRecorder
from psycopg import sql
from psycopg.types.json import Jsonb

from engramdb.domain.aggregate import AgentMemory, MessageRecord
from engramdb.domain.keys import fold
from engramdb.domain.ports import EmbeddingProvider
from engramdb.projections.embeddings import (
    CACHED_VECTOR_SQL,
    fill_cache_outside_transactions,
    text_hash,
)
from engramdb.projections.schema import (
    CONVERSATION_TABLES,
    EMBEDDING_CACHE_DDL,
    MEMORY_TABLES,
    READ_MODEL_META_DDL,
    ddl_for_tables,
)

_DDL_LOCK_KEY = 0x656E6772616D01  # serialises CREATE TABLE IF NOT EXISTS across processes


class EmbeddingModelMismatch(RuntimeError):
    """The read model was built with another embedding model: rebuild it with this one."""


def dumps(value: Any) -> str:
    """JSON for jsonb columns; event payloads may hold datetimes/UUIDs (as strings here)."""
    return json.dumps(value, default=str, sort_keys=True)


def jsonb(value: Any) -> Jsonb:
    return Jsonb(value if value is not None else {}, dumps=dumps)


def relationship_strength(mentions: int) -> float:
    """1 - 0.5^mentions: 0.5 at first sight, saturating at 1 (same formula in SQL)."""
    return 1.0 - 0.5 ** int(mentions)


def extractor_label(extractor: dict[str, Any] | None) -> str | None:
    """``extractor/model/prompt_version`` (whatever parts are known) for the message row."""
    if not extractor:
        return None
    parts = [extractor.get(k) for k in ("extractor", "model", "prompt_version")]
    return "/".join(str(p) for p in parts if p) or None


class ReadModelView(PostgresTrackingRecorder):
    """Common machinery: DDL, search_path, embedding cache, exactly-once apply."""

    projection_name: ClassVar[str] = ""
    tables: ClassVar[tuple[str, ...]] = ()
    embedded_tables: ClassVar[tuple[str, ...]] = ()
    embedder: ClassVar[EmbeddingProvider | None] = None

    def __init__(self, datastore: Any, *, bulk: bool = False, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        if self.embedder is None:
            raise TypeError(f"{type(self).__name__}: bind an embedder with bind_view()")
        self.bulk = bulk
        self.schema = self.datastore.schema
        self.search_path = sql.SQL("SET LOCAL search_path TO {}, public").format(
            sql.Identifier(self.schema)
        )
        self.trigram = self._has_trigram()
        statements = EMBEDDING_CACHE_DDL + READ_MODEL_META_DDL + self.table_ddl(not bulk)
        self.sql_create_statements.extend(sql.SQL(s) for s in statements)  # type: ignore[arg-type,misc]
        self._handlers: dict[type, Callable[[Any, Any], None]] = {}
        self.batches = 0  # committed batches / events (tests and diagnostics)
        self.events_applied = 0

    @property
    def model(self) -> EmbeddingProvider:
        assert self.embedder is not None
        return self.embedder

    def table_ddl(self, vector_indexes: bool) -> list[str]:
        return ddl_for_tables(
            self.model.dimensions, self.tables, trigram=self.trigram, vector_indexes=vector_indexes
        )

    def _has_trigram(self) -> bool:
        with self.datastore.get_connection() as conn:
            row = conn.execute("SELECT 1 AS ok FROM pg_extension WHERE extname = 'pg_trgm'").fetchone()
        return row is not None

    def _create_table(self, curs: Any) -> None:
        curs.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK_KEY,))
        curs.execute(self.search_path)
        super()._create_table(curs)
        self.check_model(curs)

    def check_model(self, curs: Any) -> None:
        """Refuse to mix vectors of two models (or dimensions) in one table."""
        for table in self.embedded_tables:
            curs.execute(
                "SELECT format_type(atttypid, atttypmod) AS t FROM pg_attribute "
                "WHERE attrelid = to_regclass(%s) AND attname = 'embedding'",
                (f"{self.schema}.{table}",),
            )
            row = curs.fetchone()
            expected = f"vector({self.model.dimensions})"
            if row is not None and row["t"] != expected:
                raise EmbeddingModelMismatch(
                    f"{table}.embedding is {row['t']}, embedder gives {expected}: rebuild"
                )
        curs.execute(
            "INSERT INTO mem_read_model_meta (projection, embedding_model, dimensions) "
            "VALUES (%s, %s, %s) ON CONFLICT (projection) DO NOTHING",
            (self.projection_name, self.model.model_id, self.model.dimensions),
        )
        curs.execute(
            "SELECT embedding_model FROM mem_read_model_meta WHERE projection = %s",
            (self.projection_name,),
        )
        row = curs.fetchone()
        if row is not None and row["embedding_model"] != self.model.model_id:
            raise EmbeddingModelMismatch(
                f"{self.projection_name} was built with {row['embedding_model']!r}, "
                f"embedder is {self.model.model_id!r}: rebuild the projection"
            )

    # ----- applying events -----------------------------------------------------------

    def texts_to_embed(self, event: Any) -> list[str]:
        return []

    def apply(self, event: Any, tracking: Tracking) -> None:
        self.apply_batch([(event, tracking)])

    def apply_batch(self, batch: Sequence[tuple[Any, Tracking]]) -> None:
        """Apply events (ascending positions) exactly once, in one transaction.

        Texts to embed are gathered first: one cache lookup, one ``embed()`` for the misses,
        one cache insert, committed on their own (a paid vector survives a failed batch).
        Rows are written in libpq pipeline mode: statements go out without waiting for each
        reply (a handler that reads — agent lookup, merge — syncs); an error anywhere aborts
        the rest and rolls the transaction back.
        """
        if not batch:
            return
        steps = [(self._handlers.get(type(event)), event) for event, _ in batch]
        texts = [t for handler, event in steps if handler is not None
                 for t in self.texts_to_embed(event)]
        if texts:
            fill_cache_outside_transactions(
                self.datastore, lambda curs: curs.execute(self.search_path), self.model, texts,
                batch_size=None,
            )
        saved = self._save_state()
        try:
            with self.datastore.transaction(commit=True) as curs, curs.connection.pipeline():
                curs.execute(self.search_path)
                self._insert_tracking(curs, batch[0][1])  # refuses a replay, locks the row
                for handler, event in steps:
                    if handler is not None:
                        handler(curs, event)
                if len(batch) > 1:
                    self._insert_tracking(curs, batch[-1][1])
        except BaseException:
            self._restore_state(saved)
            raise
        self.batches += 1
        self.events_applied += len(batch)

    def _save_state(self) -> Any:
        """In-memory caches filled while applying must not outlive a rolled-back batch."""
        return None

    def _restore_state(self, saved: Any) -> None:
        return None

    def vector_params(self, text: str) -> dict[str, str]:
        return {"model_id": self.model.model_id, "text_hash": text_hash(text)}


# =====================================================================================
# conversation: mem_messages
# =====================================================================================


class ConversationView(ReadModelView):
    projection_name = "conversation"
    tables = CONVERSATION_TABLES
    embedded_tables = ("mem_messages",)

    def __init__(self, datastore: Any, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        self._handlers = {
            MessageRecord.Recorded: self._recorded,
            MessageRecord.Processed: self._processed,
        }

    def texts_to_embed(self, event: Any) -> list[str]:
        return [event.text] if isinstance(event, MessageRecord.Recorded) else []

    def _recorded(self, curs: Any, e: Any) -> None:
        params = {
            "agent_id": e.agent_id,
            "message_id": e.message_id,
            "session_id": e.session_id,
            "speaker": e.speaker,
            "text": e.text,
            "occurred_at": e.occurred_at,
            "recorded_at": e.timestamp,
            "metadata": jsonb(e.metadata),
            "record_id": e.originator_id,
            **self.vector_params(e.text),
        }
        curs.execute(
            "INSERT INTO mem_messages (agent_id, message_id, session_id, speaker, text, "
            "occurred_at, recorded_at, metadata, record_id, embedding) VALUES (%(agent_id)s, "
            "%(message_id)s, %(session_id)s, %(speaker)s, %(text)s, %(occurred_at)s, "
            f"%(recorded_at)s, %(metadata)s, %(record_id)s, {CACHED_VECTOR_SQL})",
            params,
        )

    def _processed(self, curs: Any, e: Any) -> None:
        curs.execute(
            "UPDATE mem_messages SET processed = true, extractor = %s, llm_calls = %s, "
            "extraction_error = %s WHERE record_id = %s",
            (extractor_label(e.extractor), int(e.llm_calls or 0), e.error, e.originator_id),
        )


# =====================================================================================
# memory: facts, entities, aliases, relationships, fact<->entity links, rejections
# =====================================================================================

FACT_COLUMNS = (
    "agent_id, fact_id, entity_key, attribute_key, fact_text, category, confidence, importance, "
    "valid_from, recorded_at, status, supersedes_fact_id, source_message_id, "
    "source_message_ids, speaker, decided_by, event_versions"
)


class MemoryView(ReadModelView):
    projection_name = "memory"
    tables = MEMORY_TABLES
    embedded_tables = ("mem_facts",)

    def __init__(self, datastore: Any, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        self._agents: dict[UUID, str] = {}
        A = AgentMemory  # noqa: N806
        self._handlers = {
            A.Opened: self._opened,
            A.EntityRegistered: self._entity_registered,
            A.EntityAliased: self._entity_aliased,
            A.EntitiesMerged: self._entities_merged,
            A.RelationshipObserved: self._relationship_observed,
            A.FactAdded: self._fact_added,
            A.FactUpdated: self._fact_updated,
            A.FactConfirmed: self._fact_confirmed,
            A.FactRetracted: self._fact_retracted,
            A.DecisionRejected: self._decision_rejected,
        }

    def texts_to_embed(self, event: Any) -> list[str]:
        text = getattr(event, "text", None)
        if isinstance(event, (AgentMemory.FactAdded, AgentMemory.FactUpdated)):
            return [text] if text else []
        return []

    def _save_state(self) -> Any:
        return dict(self._agents)

    def _restore_state(self, saved: Any) -> None:
        self._agents = saved

    def _agent(self, curs: Any, originator_id: UUID) -> str:
        agent = self._agents.get(originator_id)
        if agent is None:
            curs.execute("SELECT agent_id FROM mem_agents WHERE aggregate_id = %s", (originator_id,))
            row = curs.fetchone()
            if row is None:
                raise LookupError(f"agent aggregate {originator_id} has no Opened event projected")
            agent = self._agents[originator_id] = row["agent_id"]
        return agent

    def _opened(self, curs: Any, e: Any) -> None:
        curs.execute(
            "INSERT INTO mem_agents (aggregate_id, agent_id, opened_at) VALUES (%s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            (e.originator_id, e.agent_id, e.timestamp),
        )
        self._agents[e.originator_id] = e.agent_id

    # ----- entities ------------------------------------------------------------------

    def _entity_registered(self, curs: Any, e: Any) -> None:
        agent = self._agent(curs, e.originator_id)
        curs.execute(
            "INSERT INTO mem_entities (agent_id, entity_key, display_name, entity_type, created_at) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (agent, e.entity_key, e.display_name, e.entity_type, e.timestamp),
        )
        for alias in [e.display_name, *e.aliases]:
            curs.execute(
                "INSERT INTO mem_aliases (agent_id, alias_folded, alias, entity_key) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (agent, fold(alias), alias, e.entity_key),
            )

    def _entity_aliased(self, curs: Any, e: Any) -> None:
        curs.execute(
            "INSERT INTO mem_aliases (agent_id, alias_folded, alias, entity_key) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (agent_id, alias_folded) "
            "DO UPDATE SET alias = EXCLUDED.alias, entity_key = EXCLUDED.entity_key",
            (self._agent(curs, e.originator_id), fold(e.alias), e.alias, e.entity_key),
        )

    def _entities_merged(self, curs: Any, e: Any) -> None:
        p = {"a": self._agent(curs, e.originator_id), "m": e.merged_key, "i": e.into_key}
        curs.execute(
            "UPDATE mem_entities SET merged_into = %(i)s WHERE agent_id = %(a)s "
            "AND (entity_key = %(m)s OR merged_into = %(m)s)",
            p,
        )
        curs.execute(
            "UPDATE mem_facts SET entity_key = %(i)s WHERE agent_id = %(a)s AND entity_key = %(m)s",
            p,
        )
        curs.execute(
            "UPDATE mem_aliases SET entity_key = %(i)s WHERE agent_id = %(a)s AND entity_key = %(m)s",
            p,
        )
        curs.execute(
            "INSERT INTO mem_fact_entities (agent_id, fact_id, entity_key, is_primary) "
            "SELECT agent_id, fact_id, %(i)s, is_primary FROM mem_fact_entities "
            "WHERE agent_id = %(a)s AND entity_key = %(m)s "
            "ON CONFLICT (agent_id, fact_id, entity_key) "
            "DO UPDATE SET is_primary = mem_fact_entities.is_primary OR EXCLUDED.is_primary",
            p,
        )
        curs.execute(
            "DELETE FROM mem_fact_entities WHERE agent_id = %(a)s AND entity_key = %(m)s", p
        )
        # relationships: re-point both ends, drop self-loops, sum duplicates
        curs.execute(
            "DELETE FROM mem_relationships WHERE agent_id = %(a)s "
            "AND (source_key = %(m)s OR target_key = %(m)s) "
            "RETURNING source_key, target_key, relation_type, mentions, first_seen_at, last_seen_at",
            p,
        )
        for key, (mentions, first, last) in merge_relationship_rows(
            curs.fetchall(), e.merged_key, e.into_key
        ).items():
            self._upsert_relationship(curs, p["a"], *key, mentions, first, last)

    def _upsert_relationship(
        self, curs: Any, agent: str, source: str, target: str, rel: str, mentions: int,
        first: Any, last: Any,
    ) -> None:
        curs.execute(
            "INSERT INTO mem_relationships AS r (agent_id, source_key, target_key, relation_type, "
            "strength, mentions, first_seen_at, last_seen_at) VALUES (%(a)s, %(s)s, %(t)s, %(r)s, "
            "1 - power(0.5::float8, %(n)s), %(n)s, %(f)s, %(l)s) "
            "ON CONFLICT (agent_id, source_key, target_key, relation_type) DO UPDATE SET "
            "mentions = r.mentions + EXCLUDED.mentions, "
            "strength = 1 - power(0.5::float8, r.mentions + EXCLUDED.mentions), "
            "first_seen_at = LEAST(r.first_seen_at, EXCLUDED.first_seen_at), "
            "last_seen_at = GREATEST(r.last_seen_at, EXCLUDED.last_seen_at)",
            {"a": agent, "s": source, "t": target, "r": rel, "n": mentions, "f": first, "l": last},
        )

    def _relationship_observed(self, curs: Any, e: Any) -> None:
        self._upsert_relationship(
            curs, self._agent(curs, e.originator_id), e.source_key, e.target_key,
            e.relation_type, 1, e.observed_at, e.observed_at,
        )

    # ----- facts ---------------------------------------------------------------------

    def _insert_fact(self, curs: Any, agent: str, e: Any, supersedes: str | None) -> None:
        params = {
            "agent_id": agent,
            "fact_id": e.fact_id,
            "entity_key": e.entity_key,
            "attribute_key": e.attribute_key,
            "fact_text": e.text,
            "category": e.category,
            "confidence": float(e.confidence),
            "importance": float(e.importance),
            "valid_from": e.valid_from,
            "recorded_at": e.timestamp,
            "status": "active",
            "supersedes_fact_id": supersedes,
            "source_message_id": e.source_message_id,
            "source_message_ids": [e.source_message_id] if e.source_message_id else [],
            "speaker": e.speaker,
            "decided_by": jsonb(e.decided_by),
            "event_versions": [e.originator_version],
            **self.vector_params(e.text),
        }
        values = ", ".join(f"%({c.strip()})s" for c in FACT_COLUMNS.split(","))
        curs.execute(
            f"INSERT INTO mem_facts ({FACT_COLUMNS}, embedding) VALUES ({values}, "
            f"{CACHED_VECTOR_SQL})",
            params,
        )
        links = [(agent, e.fact_id, e.entity_key, True)]
        links += [(agent, e.fact_id, key, False) for key in e.linked_entities]
        curs.executemany(
            "INSERT INTO mem_fact_entities (agent_id, fact_id, entity_key, is_primary) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            links,
        )

    def _fact_added(self, curs: Any, e: Any) -> None:
        self._insert_fact(curs, self._agent(curs, e.originator_id), e, None)

    def _fact_updated(self, curs: Any, e: Any) -> None:
        agent = self._agent(curs, e.originator_id)
        curs.execute(
            "UPDATE mem_facts SET status = 'superseded', superseded_by = %s, valid_to = %s, "
            "invalidated_at = %s, event_versions = array_append(event_versions, %s) "
            "WHERE agent_id = %s AND fact_id = %s",
            (e.fact_id, e.valid_from, e.timestamp, e.originator_version, agent,
             e.supersedes_fact_id),
        )
        self._insert_fact(curs, agent, e, e.supersedes_fact_id)

    def _fact_confirmed(self, curs: Any, e: Any) -> None:
        curs.execute(
            "UPDATE mem_facts SET reinforcement_count = reinforcement_count + 1, "
            "last_confirmed_at = GREATEST(last_confirmed_at, %(at)s), "
            "source_message_ids = CASE WHEN %(m)s::text IS NULL "
            "OR %(m)s::text = ANY(source_message_ids) THEN source_message_ids "
            "ELSE array_append(source_message_ids, %(m)s::text) END, "
            "event_versions = array_append(event_versions, %(v)s) "
            "WHERE agent_id = %(a)s AND fact_id = %(f)s",
            {
                "at": e.confirmed_at, "m": e.message_id, "v": e.originator_version,
                "a": self._agent(curs, e.originator_id), "f": e.fact_id,
            },
        )

    def _fact_retracted(self, curs: Any, e: Any) -> None:
        curs.execute(
            "UPDATE mem_facts SET status = 'retracted', valid_to = %s, invalidated_at = %s, "
            "event_versions = array_append(event_versions, %s) "
            "WHERE agent_id = %s AND fact_id = %s",
            (e.retracted_at, e.timestamp, e.originator_version,
             self._agent(curs, e.originator_id), e.fact_id),
        )

    def _decision_rejected(self, curs: Any, e: Any) -> None:
        curs.execute(
            "INSERT INTO mem_rejections (agent_id, message_id, reason, decision, recorded_at, "
            "event_version) VALUES (%s, %s, %s, %s, %s, %s)",
            (self._agent(curs, e.originator_id), e.message_id, e.reason, jsonb(e.decision),
             e.timestamp, e.originator_version),
        )


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


VIEW_CLASSES: dict[str, type[ReadModelView]] = {
    "conversation": ConversationView,
    "memory": MemoryView,
}


def bind_view(view_class: type[ReadModelView], embedder: EmbeddingProvider) -> type[ReadModelView]:
    """A subclass of ``view_class`` carrying ``embedder`` (ProjectionRunner wants a class)."""
    return type(
        f"{view_class.__name__}_{embedder.model_id}".replace("-", "_").replace(".", "_"),
        (view_class,),
        {"embedder": embedder, "__module__": view_class.__module__},
    )
