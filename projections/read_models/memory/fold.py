"""The ``memory`` read model folded in memory, for bulk rebuild.

Same semantics as ``memory.view`` (facts via ``domain.fold``, the reference model); the
rebuild test proves the two give identical tables.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter
from typing import Any
from uuid import UUID

from engramdb.domain.aggregate import AgentMemory, MessageRecord
from engramdb.domain.fold import FactFold
from engramdb.domain.jobs import AgentJobs
from engramdb.domain.keys import match_key
from engramdb.projections.bulk_copy import jsonb_bytes
from engramdb.projections.handlers import handles
from engramdb.projections.read_model import BulkFold, jsonb
from engramdb.projections.read_models.memory.tables import (
    AGENTS,
    ALIASES,
    COMMUNITIES,
    ENTITIES,
    FACT_ENTITIES,
    FACT_USAGE,
    FACTS,
    FORGOTTEN,
    HIDDEN_MESSAGES,
    PATTERNS,
    REJECTIONS,
    RELATIONSHIPS,
    TURN_SCOPES,
    community_row,
    hidden_message_rows,
    merge_relationship_rows,
    pattern_row,
    relationship_strength,
    turn_scope,
)


def _fact_tuple() -> Any:
    """FactRow -> its ``mem_facts`` values in ``row_columns`` order: ``fact_values`` read with
    one C-level attrgetter (no dict per row — the bulk load's hot loop)."""
    columns = FACTS.row_columns
    get = attrgetter(*columns)
    at, scope = columns.index("decided_by"), columns.index("source_scope")
    assert at < scope  # the two jsonb columns, in this order

    def values(row: Any) -> tuple[Any, ...]:
        v = get(row)
        return (*v[:at], jsonb_bytes(row.decided_by), *v[at + 1:scope],
                jsonb_bytes(row.source_scope), *v[scope + 1:])

    return values


class MemoryFold(BulkFold):
    def __init__(self) -> None:
        super().__init__()
        self.facts = FactFold()
        self.opened: dict[UUID, Any] = {}
        self.entities: dict[tuple[str, str], list[Any]] = {}
        self.aliases: dict[tuple[str, str], list[str]] = {}
        self.relationships: dict[tuple[str, str, str, str], tuple[int, Any, Any]] = {}
        self.links: dict[tuple[str, str, str], bool] = {}
        self.rejections: list[tuple[Any, ...]] = []
        self.hidden: dict[tuple[str, str], tuple[Any, ...]] = {}
        self.forgotten: list[tuple[Any, ...]] = []
        self.patterns: dict[tuple[str, str], tuple[Any, ...]] = {}
        self.communities: dict[tuple[str, str], tuple[Any, ...]] = {}
        self.turn_scopes: dict[tuple[str, str], dict[str, Any]] = {}

    def apply(self, event: Any) -> None:
        if isinstance(event, MessageRecord.Recorded):  # turns are not the facts' fold's
            super().apply(event)
            return
        if not isinstance(event, (AgentMemory.Event, AgentJobs.Event)):
            return
        self.facts.apply(event)  # Opened teaches it the agent id first
        super().apply(event)

    @handles(MessageRecord.Recorded)
    def _recorded(self, e: MessageRecord.Recorded) -> None:
        self.turn_scopes.setdefault((e.agent_id, e.message_id), turn_scope(e))

    @handles(AgentMemory.Opened)
    def _opened(self, e: AgentMemory.Opened) -> None:
        self.opened.setdefault(e.originator_id, e.timestamp)

    @handles(AgentMemory.EntityRegistered)
    def _entity_registered(self, e: AgentMemory.EntityRegistered) -> None:
        a = self.facts.agent_of(e)
        self.entities.setdefault(
            (a, e.entity_key), [e.display_name, e.entity_type, "", None, e.timestamp, 0.5, None, None]
        )
        for alias in [e.display_name, *e.aliases]:
            self.aliases.setdefault((a, match_key(alias)), [alias, e.entity_key])

    @handles(AgentMemory.EntityAliased)
    def _entity_aliased(self, e: AgentMemory.EntityAliased) -> None:
        self.aliases[(self.facts.agent_of(e), match_key(e.alias))] = [e.alias, e.entity_key]

    @handles(AgentMemory.EntitiesMerged)
    def _entities_merged(self, e: AgentMemory.EntitiesMerged) -> None:
        a, m, i = self.facts.agent_of(e), e.merged_key, e.into_key
        for (agent, key), ent in self.entities.items():
            if agent == a and (key == m or ent[3] == m):
                ent[3] = i
        for (agent, _), alias in self.aliases.items():
            if agent == a and alias[1] == m:
                alias[1] = i
        for (agent, fact_id, key), primary in list(self.links.items()):
            if agent == a and key == m:
                del self.links[(agent, fact_id, key)]
                self.links[(agent, fact_id, i)] = self.links.get((agent, fact_id, i), False) or primary
        moved = []
        for key4, (n, first, last) in list(self.relationships.items()):
            if key4[0] == a and m in (key4[1], key4[2]):
                del self.relationships[key4]
                moved.append({
                    "source_key": key4[1], "target_key": key4[2], "relation_type": key4[3],
                    "mentions": n, "first_seen_at": first, "last_seen_at": last,
                })
        for (s, t, r), (n, first, last) in merge_relationship_rows(moved, m, i).items():
            self._observe(a, s, t, r, n, first, last)

    def _observe(self, a: str, s: str, t: str, r: str, n: int, first: Any, last: Any) -> None:
        key = (a, s, t, r)
        if key in self.relationships:
            n0, f0, l0 = self.relationships[key]
            n, first, last = n0 + n, min(f0, first), max(l0, last)
        self.relationships[key] = (n, first, last)

    @handles(AgentMemory.RelationshipObserved)
    def _relationship_observed(self, e: AgentMemory.RelationshipObserved) -> None:
        self._observe(
            self.facts.agent_of(e), e.source_key, e.target_key, e.relation_type, 1,
            e.observed_at, e.observed_at,
        )

    @handles(AgentMemory.FactAdded, AgentMemory.FactUpdated)
    def _link(self, e: AgentMemory.FactAdded | AgentMemory.FactUpdated) -> None:
        a = self.facts.agent_of(e)
        self.links.setdefault((a, e.fact_id, e.entity_key), True)
        for key in e.linked_entities:
            self.links.setdefault((a, e.fact_id, key), False)

    @handles(AgentMemory.FactRetracted)
    def _fact_retracted(self, e: AgentMemory.FactRetracted) -> None:
        a = self.facts.agent_of(e)
        row = self.facts.rows.get((a, e.fact_id))
        for hidden in hidden_message_rows(a, e, row.source_message_ids if row else []):
            self.hidden.setdefault((a, hidden[1]), hidden)

    @handles(AgentMemory.Forgotten)
    def _forgotten(self, e: AgentMemory.Forgotten) -> None:
        self.forgotten.append((self.facts.agent_of(e), e.originator_version, e.timestamp))

    @handles(AgentJobs.ImportanceAssessed)
    def _importance_assessed(self, e: AgentJobs.ImportanceAssessed) -> None:
        for key, value in e.entities.items():
            ent = self.entities.get((e.agent_id, key))
            if ent is not None:
                ent[5] = float(value)

    @handles(AgentJobs.PatternObserved)
    def _pattern_observed(self, e: AgentJobs.PatternObserved) -> None:
        self.patterns[(e.agent_id, e.pattern_id)] = pattern_row(e)

    @handles(AgentJobs.PatternRetired)
    def _pattern_retired(self, e: AgentJobs.PatternRetired) -> None:
        self.patterns.pop((e.agent_id, e.pattern_id), None)

    @handles(AgentJobs.CommunityDetected)
    def _community_detected(self, e: AgentJobs.CommunityDetected) -> None:
        self.communities[(e.agent_id, e.community_id)] = community_row(e)

    @handles(AgentJobs.CommunityDissolved)
    def _community_dissolved(self, e: AgentJobs.CommunityDissolved) -> None:
        self.communities.pop((e.agent_id, e.community_id), None)

    @handles(AgentJobs.ProfileRefreshed)
    def _profile_refreshed(self, e: AgentJobs.ProfileRefreshed) -> None:
        ent = self.entities.get((e.agent_id, e.entity_key))
        if ent is not None:
            ent[2], ent[6], ent[7] = e.text, e.method, e.reference_time

    @handles(AgentMemory.DecisionRejected)
    def _decision_rejected(self, e: AgentMemory.DecisionRejected) -> None:
        self.rejections.append(
            (self.facts.agent_of(e), e.message_id, e.reason, jsonb(e.decision), e.timestamp,
             e.originator_version)
        )

    def _with_scope(self, row: Any) -> Any:
        """The row with its final sources' scopes (the view's ``SOURCE_SCOPE``)."""
        scopes = self.turn_scopes
        row.source_scope = [scopes[k] for k in ((row.agent_id, m) for m in row.source_message_ids)
                            if k in scopes]
        return row

    def texts(self) -> list[str]:
        return [row.fact_text for row in self.facts.rows.values()]

    def rows(self, table: str) -> Iterable[tuple[Any, ...]]:
        if table == AGENTS.name:
            return [(oid, self.facts.agents[oid], at) for oid, at in self.opened.items()]
        if table == FACTS.name:
            return map(_fact_tuple(), map(self._with_scope, self.facts.rows.values()))
        if table == TURN_SCOPES.name:
            return [(a, m, jsonb_bytes(scope)) for (a, m), scope in self.turn_scopes.items()]
        if table == FACT_USAGE.name:
            columns = FACT_USAGE.row_columns
            return [tuple(vars(u)[c] for c in columns) for u in self.facts.usage.values()]
        if table == ENTITIES.name:
            return [(a, k, *ent) for (a, k), ent in self.entities.items()]
        if table == ALIASES.name:
            return [(a, f, alias, key) for (a, f), (alias, key) in self.aliases.items()]
        if table == RELATIONSHIPS.name:
            return [
                (a, s, t, r, relationship_strength(n), n, first, last)
                for (a, s, t, r), (n, first, last) in self.relationships.items()
            ]
        if table == FACT_ENTITIES.name:
            return [(a, f, k, p) for (a, f, k), p in self.links.items()]
        if table == REJECTIONS.name:
            return list(self.rejections)
        if table == HIDDEN_MESSAGES.name:
            return list(self.hidden.values())
        if table == PATTERNS.name:
            return list(self.patterns.values())
        if table == COMMUNITIES.name:
            return list(self.communities.values())
        if table == FORGOTTEN.name:
            return list(self.forgotten)
        raise KeyError(table)
