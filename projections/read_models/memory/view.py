"""The ``memory`` projector: per-event SQL for facts, entities, aliases, relationships,
fact<->entity links and rejections (one transaction per batch, ``ReadModelView``).

Agent events carry only their aggregate id; ``Opened`` maps it to the agent id in
``mem_agents`` and the view caches the mapping (rolled back with a failed batch).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from engramdb.domain.aggregate import AgentMemory, MessageRecord
from engramdb.domain.fold import new_fact_row
from engramdb.domain.jobs import AgentJobs
from engramdb.domain.keys import match_key
from engramdb.domain.payloads import FactPayload
from engramdb.projections.embeddings import CACHED_VECTOR_SQL
from engramdb.projections.erasure import drop_agent_rows
from engramdb.projections.handlers import handles
from engramdb.projections.libpq_pipeline import fetch_row, fetch_rows
from engramdb.projections.read_model import ReadModelView, jsonb
from engramdb.projections.read_models.memory.tables import (
    FACT_SOURCE_SCOPE,
    FACTS,
    SOURCE_SCOPE,
    TABLES,
    community_row,
    fact_values,
    hidden_message_rows,
    merge_relationship_rows,
    pattern_row,
    turn_scope,
)

# ``source_scope`` is computed here from the turns this model has seen, not passed in
_INSERTED_SCOPE = SOURCE_SCOPE.format(agent="%(agent_id)s", ids="%(source_message_ids)s::text[]")
_FACT_INSERT = (
    f"INSERT INTO mem_facts ({', '.join(FACTS.row_columns)}, embedding) VALUES ("
    + ", ".join(_INSERTED_SCOPE if c == "source_scope" else f"%({c})s"
                for c in FACTS.row_columns)
    + f", {CACHED_VECTOR_SQL})"
)
# ``FactConfirmed``: the row's sources with the confirming turn appended (once), and their scope
_CONFIRMED_SOURCES = (
    "CASE WHEN %(m)s::text IS NULL OR %(m)s::text = ANY(f.source_message_ids) "
    "THEN f.source_message_ids ELSE array_append(f.source_message_ids, %(m)s::text) END"
)
_CONFIRMED_SCOPE = SOURCE_SCOPE.format(agent="f.agent_id", ids=_CONFIRMED_SOURCES)


class MemoryView(ReadModelView):
    projection_name = "memory"
    tables = TABLES

    def __init__(self, datastore: Any, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        self._agents: dict[UUID, str] = {}

    def texts_to_embed(self, event: Any) -> list[str]:
        if isinstance(event, (AgentMemory.FactAdded, AgentMemory.FactUpdated)):
            return [event.text] if event.text else []
        return []

    def _save_state(self) -> Any:
        return dict(self._agents)

    def _restore_state(self, saved: Any) -> None:
        self._agents = saved

    def _agent(self, curs: Any, originator_id: UUID) -> str:
        agent = self._agents.get(originator_id)
        if agent is None:
            row = fetch_row(
                curs, "SELECT agent_id FROM mem_agents WHERE aggregate_id = %s", (originator_id,)
            )
            if row is None:
                raise LookupError(f"agent aggregate {originator_id} has no Opened event projected")
            agent = self._agents[originator_id] = row["agent_id"]
        return agent

    @handles(MessageRecord.Recorded)
    def _recorded(self, curs: Any, e: MessageRecord.Recorded) -> None:
        """Keep the turn's scope; a fact projected before its turn (rebuild agrees) is fixed
        up — the GIN index on ``source_message_ids`` finds it. The agent test is written
        ``IS TRUE`` so that no plan ANDs the agent's btree into the bitmap: a generic plan did,
        reading all 100k index entries of a large agent (8 ms a turn) to find none."""
        curs.execute(
            "INSERT INTO mem_turn_scopes (agent_id, message_id, scope) VALUES (%s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            (e.agent_id, e.message_id, jsonb(turn_scope(e))),
        )
        curs.execute(
            f"UPDATE mem_facts f SET source_scope = {FACT_SOURCE_SCOPE} "
            "WHERE f.source_message_ids @> ARRAY[%s]::text[] AND (f.agent_id = %s) IS TRUE",
            (e.message_id, e.agent_id),
        )

    @handles(AgentMemory.Opened)
    def _opened(self, curs: Any, e: AgentMemory.Opened) -> None:
        curs.execute(
            "INSERT INTO mem_agents (aggregate_id, agent_id, opened_at) VALUES (%s, %s, %s) "
            "ON CONFLICT DO NOTHING",
            (e.originator_id, e.agent_id, e.timestamp),
        )
        self._agents[e.originator_id] = e.agent_id

    # ----- entities ------------------------------------------------------------------

    @handles(AgentMemory.EntityRegistered)
    def _entity_registered(self, curs: Any, e: AgentMemory.EntityRegistered) -> None:
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
                (agent, match_key(alias), alias, e.entity_key),
            )

    @handles(AgentMemory.EntityAliased)
    def _entity_aliased(self, curs: Any, e: AgentMemory.EntityAliased) -> None:
        curs.execute(
            "INSERT INTO mem_aliases (agent_id, alias_folded, alias, entity_key) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (agent_id, alias_folded) "
            "DO UPDATE SET alias = EXCLUDED.alias, entity_key = EXCLUDED.entity_key",
            (self._agent(curs, e.originator_id), match_key(e.alias), e.alias, e.entity_key),
        )

    @handles(AgentMemory.EntitiesMerged)
    def _entities_merged(self, curs: Any, e: AgentMemory.EntitiesMerged) -> None:
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
        removed = fetch_rows(
            curs,
            "DELETE FROM mem_relationships WHERE agent_id = %(a)s "
            "AND (source_key = %(m)s OR target_key = %(m)s) "
            "RETURNING source_key, target_key, relation_type, mentions, first_seen_at, last_seen_at",
            p,
        )
        for key, (mentions, first, last) in merge_relationship_rows(
            removed, e.merged_key, e.into_key
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

    @handles(AgentMemory.RelationshipObserved)
    def _relationship_observed(self, curs: Any, e: AgentMemory.RelationshipObserved) -> None:
        self._upsert_relationship(
            curs, self._agent(curs, e.originator_id), e.source_key, e.target_key,
            e.relation_type, 1, e.observed_at, e.observed_at,
        )

    # ----- facts ---------------------------------------------------------------------

    def _insert_fact(
        self, curs: Any, agent: str, e: AgentMemory.FactAdded | AgentMemory.FactUpdated,
        supersedes: str | None,
    ) -> None:
        fact: FactPayload = e
        row = new_fact_row(agent, fact, e.timestamp, e.originator_version, supersedes)
        curs.execute(_FACT_INSERT, {**fact_values(row), **self.vector_params(fact.text)})
        links = [(agent, fact.fact_id, fact.entity_key, True)]
        links += [(agent, fact.fact_id, key, False) for key in fact.linked_entities]
        curs.executemany(
            "INSERT INTO mem_fact_entities (agent_id, fact_id, entity_key, is_primary) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            links,
        )

    @handles(AgentMemory.FactAdded)
    def _fact_added(self, curs: Any, e: AgentMemory.FactAdded) -> None:
        self._insert_fact(curs, self._agent(curs, e.originator_id), e, None)

    @handles(AgentMemory.FactUpdated)
    def _fact_updated(self, curs: Any, e: AgentMemory.FactUpdated) -> None:
        agent = self._agent(curs, e.originator_id)
        curs.execute(
            "UPDATE mem_facts SET status = 'superseded', superseded_by = %s, valid_to = %s, "
            "invalidated_at = %s, event_versions = array_append(event_versions, %s) "
            "WHERE agent_id = %s AND fact_id = %s",
            (e.fact_id, e.valid_from, e.timestamp, e.originator_version, agent,
             e.supersedes_fact_id),
        )
        self._insert_fact(curs, agent, e, e.supersedes_fact_id)

    @handles(AgentMemory.FactConfirmed)
    def _fact_confirmed(self, curs: Any, e: AgentMemory.FactConfirmed) -> None:
        # the confirming turn joins the sources (once), and its scope the fact's: one UPDATE,
        # both computed from the row's old sources (one new row version, not two)
        curs.execute(
            "UPDATE mem_facts f SET reinforcement_count = reinforcement_count + 1, "
            "last_confirmed_at = GREATEST(last_confirmed_at, %(at)s), "
            f"source_message_ids = {_CONFIRMED_SOURCES}, "
            f"source_scope = {_CONFIRMED_SCOPE}, "
            "event_versions = array_append(event_versions, %(v)s) "
            "WHERE agent_id = %(a)s AND fact_id = %(f)s",
            {
                "at": e.confirmed_at, "m": e.message_id, "v": e.originator_version,
                "a": self._agent(curs, e.originator_id), "f": e.fact_id,
            },
        )

    @handles(AgentMemory.FactRetracted)
    def _fact_retracted(self, curs: Any, e: AgentMemory.FactRetracted) -> None:
        agent = self._agent(curs, e.originator_id)
        row = fetch_row(
            curs,
            "UPDATE mem_facts SET status = 'retracted', valid_to = %s, invalidated_at = %s, "
            "event_versions = array_append(event_versions, %s) "
            "WHERE agent_id = %s AND fact_id = %s RETURNING source_message_ids",
            (e.retracted_at, e.timestamp, e.originator_version, agent, e.fact_id),
        )
        hidden = hidden_message_rows(agent, e, row["source_message_ids"] if row else [])
        curs.executemany(
            "INSERT INTO mem_hidden_messages (agent_id, message_id, hidden_at, fact_id) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
            hidden,
        )

    @handles(AgentMemory.Forgotten)
    def _forgotten(self, curs: Any, e: AgentMemory.Forgotten) -> None:
        agent = self._agent(curs, e.originator_id)
        curs.execute(
            "UPDATE mem_facts SET status = 'forgotten', valid_to = %s, invalidated_at = %s, "
            "event_versions = array_append(event_versions, %s) "
            "WHERE agent_id = %s AND status = 'active'",
            (e.forgotten_at, e.timestamp, e.originator_version, agent),
        )
        curs.execute(
            "INSERT INTO mem_forgotten (agent_id, event_version, forgotten_at) "
            "VALUES (%s, %s, %s)",
            (agent, e.originator_version, e.timestamp),
        )

    @handles(AgentMemory.Erased)
    def _erased(self, curs: Any, e: AgentMemory.Erased) -> None:
        drop_agent_rows(curs, e.agent_id, self.tables)
        self._agents.pop(e.originator_id, None)

    @handles(AgentMemory.CorrectionNoted)
    def _correction_noted(self, curs: Any, e: AgentMemory.CorrectionNoted) -> None:
        curs.execute(
            "UPDATE mem_facts SET is_correction = true, "
            "event_versions = array_append(event_versions, %s) "
            "WHERE agent_id = %s AND fact_id = %s",
            (e.originator_version, self._agent(curs, e.originator_id), e.fact_id),
        )

    # ----- job results (ADR-0019): another aggregate, events name their agent ---------

    @handles(AgentJobs.RetrievalsObserved)
    def _retrievals_observed(self, curs: Any, e: AgentJobs.RetrievalsObserved) -> None:
        ids = list(e.counts)
        curs.execute(
            "INSERT INTO mem_fact_usage AS g (agent_id, fact_id, times_retrieved, "
            "last_retrieved_at) SELECT f.agent_id, f.fact_id, u.n, u.t "
            "FROM unnest(%s::text[], %s::int[], %s::timestamptz[]) AS u(fid, n, t) "
            "JOIN mem_facts f ON f.agent_id = %s AND f.fact_id = u.fid "
            "ON CONFLICT (agent_id, fact_id) DO UPDATE SET "
            "times_retrieved = g.times_retrieved + EXCLUDED.times_retrieved, "
            "last_retrieved_at = GREATEST(g.last_retrieved_at, EXCLUDED.last_retrieved_at)",
            (ids, [int(e.counts[i]) for i in ids], [e.last_at.get(i) for i in ids], e.agent_id),
        )

    @handles(AgentJobs.ImportanceAssessed)
    def _importance_assessed(self, curs: Any, e: AgentJobs.ImportanceAssessed) -> None:
        if e.facts:
            curs.execute(
                "INSERT INTO mem_fact_usage AS g (agent_id, fact_id, importance) "
                "SELECT f.agent_id, f.fact_id, u.v "
                "FROM unnest(%s::text[], %s::real[]) AS u(fid, v) "
                "JOIN mem_facts f ON f.agent_id = %s AND f.fact_id = u.fid "
                "ON CONFLICT (agent_id, fact_id) DO UPDATE SET importance = EXCLUDED.importance",
                (list(e.facts), [float(v) for v in e.facts.values()], e.agent_id),
            )
        if e.entities:
            curs.execute(
                "UPDATE mem_entities t SET importance = u.v "
                "FROM unnest(%s::text[], %s::real[]) AS u(k, v) "
                "WHERE t.agent_id = %s AND t.entity_key = u.k",
                (list(e.entities), [float(v) for v in e.entities.values()], e.agent_id),
            )

    @handles(AgentJobs.PatternObserved)
    def _pattern_observed(self, curs: Any, e: AgentJobs.PatternObserved) -> None:
        curs.execute(
            "INSERT INTO mem_patterns (agent_id, pattern_id, pattern_text, supporting_fact_ids, "
            "confidence, recorded_at, kind, method, message_ids) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (agent_id, pattern_id) "
            "DO UPDATE SET pattern_text = EXCLUDED.pattern_text, "
            "supporting_fact_ids = EXCLUDED.supporting_fact_ids, "
            "confidence = EXCLUDED.confidence, recorded_at = EXCLUDED.recorded_at, "
            "kind = EXCLUDED.kind, method = EXCLUDED.method, message_ids = EXCLUDED.message_ids",
            pattern_row(e),
        )

    @handles(AgentJobs.PatternRetired)
    def _pattern_retired(self, curs: Any, e: AgentJobs.PatternRetired) -> None:
        curs.execute("DELETE FROM mem_patterns WHERE agent_id = %s AND pattern_id = %s",
                     (e.agent_id, e.pattern_id))

    @handles(AgentJobs.FactVitalityAssessed)
    def _vitality_assessed(self, curs: Any, e: AgentJobs.FactVitalityAssessed) -> None:
        ids, low = list(e.facts), set(e.low)
        curs.execute(
            "INSERT INTO mem_fact_usage AS g (agent_id, fact_id, vitality, low_vitality) "
            "SELECT f.agent_id, f.fact_id, u.v, u.l "
            "FROM unnest(%s::text[], %s::real[], %s::boolean[]) AS u(fid, v, l) "
            "JOIN mem_facts f ON f.agent_id = %s AND f.fact_id = u.fid "
            "ON CONFLICT (agent_id, fact_id) DO UPDATE SET vitality = EXCLUDED.vitality, "
            "low_vitality = EXCLUDED.low_vitality",
            (ids, [float(e.facts[i]) for i in ids], [i in low for i in ids], e.agent_id),
        )

    @handles(AgentJobs.CommunityDetected)
    def _community_detected(self, curs: Any, e: AgentJobs.CommunityDetected) -> None:
        curs.execute(
            "INSERT INTO mem_communities (agent_id, community_id, members, label, method, "
            "detected_at) VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (agent_id, community_id) "
            "DO UPDATE SET members = EXCLUDED.members, label = EXCLUDED.label, "
            "method = EXCLUDED.method, detected_at = EXCLUDED.detected_at",
            community_row(e),
        )

    @handles(AgentJobs.CommunityDissolved)
    def _community_dissolved(self, curs: Any, e: AgentJobs.CommunityDissolved) -> None:
        curs.execute("DELETE FROM mem_communities WHERE agent_id = %s AND community_id = %s",
                     (e.agent_id, e.community_id))

    @handles(AgentJobs.ProfileRefreshed)
    def _profile_refreshed(self, curs: Any, e: AgentJobs.ProfileRefreshed) -> None:
        curs.execute(
            "UPDATE mem_entities SET profile_text = %s, profile_method = %s, "
            "profile_refreshed_at = %s WHERE agent_id = %s AND entity_key = %s",
            (e.text, e.method, e.reference_time, e.agent_id, e.entity_key),
        )

    @handles(AgentMemory.DecisionRejected)
    def _decision_rejected(self, curs: Any, e: AgentMemory.DecisionRejected) -> None:
        curs.execute(
            "INSERT INTO mem_rejections (agent_id, message_id, reason, decision, recorded_at, "
            "event_version) VALUES (%s, %s, %s, %s, %s, %s)",
            (self._agent(curs, e.originator_id), e.message_id, e.reason, jsonb(e.decision),
             e.timestamp, e.originator_version),
        )
