"""In-memory fold of the whole log to read-model rows, for bulk rebuild.

Same semantics as the per-event SQL of ``projections.views`` (facts via ``domain.fold``, the
reference model); the rebuild test proves the two give identical tables. Rows come out in the
column order of ``COLUMNS`` for COPY. Embeddings are not here: rebuild joins them from the
embedding cache in SQL.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from engramdb.domain.aggregate import AgentMemory, MessageRecord
from engramdb.domain.fold import FactFold
from engramdb.domain.keys import fold
from engramdb.projections.views import (
    extractor_label,
    jsonb,
    merge_relationship_rows,
    relationship_strength,
)

COLUMNS: dict[str, tuple[str, ...]] = {
    "mem_messages": (
        "agent_id", "message_id", "session_id", "speaker", "text", "occurred_at", "recorded_at",
        "metadata", "processed", "extractor", "llm_calls", "extraction_error", "record_id",
    ),
    "mem_agents": ("aggregate_id", "agent_id", "opened_at"),
    "mem_facts": (
        "agent_id", "fact_id", "entity_key", "attribute_key", "fact_text", "category",
        "confidence", "importance", "reinforcement_count", "valid_from", "valid_to",
        "recorded_at", "invalidated_at", "status", "supersedes_fact_id", "superseded_by",
        "source_message_id", "source_message_ids", "speaker", "decided_by", "last_confirmed_at",
        "times_retrieved", "event_versions",
    ),
    "mem_entities": (
        "agent_id", "entity_key", "display_name", "entity_type", "profile_text", "merged_into",
        "created_at",
    ),
    "mem_aliases": ("agent_id", "alias_folded", "alias", "entity_key"),
    "mem_relationships": (
        "agent_id", "source_key", "target_key", "relation_type", "strength", "mentions",
        "first_seen_at", "last_seen_at",
    ),
    "mem_fact_entities": ("agent_id", "fact_id", "entity_key", "is_primary"),
    "mem_rejections": (
        "agent_id", "message_id", "reason", "decision", "recorded_at", "event_version",
    ),
}
# table -> column holding the text whose cached vector fills ``embedding``
EMBEDDED_TEXT = {"mem_messages": "text", "mem_facts": "fact_text"}


class ConversationFold:
    tables = ("mem_messages",)

    def __init__(self) -> None:
        self.messages: dict[UUID, dict[str, Any]] = {}

    def apply(self, e: Any) -> None:
        if isinstance(e, MessageRecord.Recorded):
            self.messages[e.originator_id] = {
                "agent_id": e.agent_id, "message_id": e.message_id, "session_id": e.session_id,
                "speaker": e.speaker, "text": e.text, "occurred_at": e.occurred_at,
                "recorded_at": e.timestamp, "metadata": jsonb(e.metadata), "processed": False,
                "extractor": None, "llm_calls": 0, "extraction_error": None,
                "record_id": e.originator_id,
            }
        elif isinstance(e, MessageRecord.Processed):
            row = self.messages.get(e.originator_id)
            if row is not None:
                row.update(
                    processed=True, extractor=extractor_label(e.extractor),
                    llm_calls=int(e.llm_calls or 0), extraction_error=e.error,
                )

    def texts(self) -> list[str]:
        return [m["text"] for m in self.messages.values()]

    def rows(self, table: str) -> list[tuple[Any, ...]]:
        cols = COLUMNS[table]
        return [tuple(m[c] for c in cols) for m in self.messages.values()]


class MemoryFold:
    tables = (
        "mem_agents", "mem_facts", "mem_entities", "mem_aliases", "mem_relationships",
        "mem_fact_entities", "mem_rejections",
    )

    def __init__(self) -> None:
        self.facts = FactFold()
        self.opened: dict[UUID, Any] = {}
        self.entities: dict[tuple[str, str], list[Any]] = {}
        self.aliases: dict[tuple[str, str], list[str]] = {}
        self.relationships: dict[tuple[str, str, str, str], tuple[int, Any, Any]] = {}
        self.links: dict[tuple[str, str, str], bool] = {}
        self.rejections: list[tuple[Any, ...]] = []

    def apply(self, e: Any) -> None:
        if not isinstance(e, AgentMemory.Event):
            return
        self.facts.apply(e)
        if isinstance(e, AgentMemory.Opened):
            self.opened.setdefault(e.originator_id, e.timestamp)
            return
        handler = getattr(self, f"_on_{type(e).__name__}", None)
        if handler is not None:
            handler(self.facts.agent_of(e), e)

    def _on_EntityRegistered(self, a: str, e: Any) -> None:  # noqa: N802
        self.entities.setdefault(
            (a, e.entity_key), [e.display_name, e.entity_type, "", None, e.timestamp]
        )
        for alias in [e.display_name, *e.aliases]:
            self.aliases.setdefault((a, fold(alias)), [alias, e.entity_key])

    def _on_EntityAliased(self, a: str, e: Any) -> None:  # noqa: N802
        self.aliases[(a, fold(e.alias))] = [e.alias, e.entity_key]

    def _on_EntitiesMerged(self, a: str, e: Any) -> None:  # noqa: N802
        m, i = e.merged_key, e.into_key
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

    def _on_RelationshipObserved(self, a: str, e: Any) -> None:  # noqa: N802
        self._observe(a, e.source_key, e.target_key, e.relation_type, 1, e.observed_at, e.observed_at)

    def _link(self, a: str, e: Any) -> None:
        self.links.setdefault((a, e.fact_id, e.entity_key), True)
        for key in e.linked_entities:
            self.links.setdefault((a, e.fact_id, key), False)

    def _on_FactAdded(self, a: str, e: Any) -> None:  # noqa: N802
        self._link(a, e)

    def _on_FactUpdated(self, a: str, e: Any) -> None:  # noqa: N802
        self._link(a, e)

    def _on_DecisionRejected(self, a: str, e: Any) -> None:  # noqa: N802
        self.rejections.append(
            (a, e.message_id, e.reason, jsonb(e.decision), e.timestamp, e.originator_version)
        )

    def texts(self) -> list[str]:
        return [row.fact_text for row in self.facts.rows.values()]

    def rows(self, table: str) -> list[tuple[Any, ...]]:
        if table == "mem_agents":
            return [(oid, self.facts.agents[oid], at) for oid, at in self.opened.items()]
        if table == "mem_facts":
            cols = COLUMNS[table]
            out = []
            for row in self.facts.rows.values():
                values = dict(vars(row))
                values["decided_by"] = jsonb(row.decided_by)
                out.append(tuple(values[c] for c in cols))
            return out
        if table == "mem_entities":
            return [(a, k, *ent) for (a, k), ent in self.entities.items()]
        if table == "mem_aliases":
            return [(a, f, alias, key) for (a, f), (alias, key) in self.aliases.items()]
        if table == "mem_relationships":
            return [
                (a, s, t, r, relationship_strength(n), n, first, last)
                for (a, s, t, r), (n, first, last) in self.relationships.items()
            ]
        if table == "mem_fact_entities":
            return [(a, f, k, p) for (a, f, k), p in self.links.items()]
        if table == "mem_rejections":
            return list(self.rejections)
        raise KeyError(table)


FOLDS: dict[str, type[ConversationFold] | type[MemoryFold]] = {
    "conversation": ConversationFold,
    "memory": MemoryFold,
}
