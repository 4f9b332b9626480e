"""Reads the web inspector needs beyond ``queries`` (issue 23): an agent list with its counts,
the instants of an agent's history, a diff between two instants, a bounded piece of the entity
graph, patterns, sessions, job runs and erasure markers — from the read models only.

Why these are SQL and bounded: the inspector must never load a whole agent (ADR-0044: every
page renders in ≤ 300 ms at 100k facts). Lists are keyset-paginated like ``queries``; what
cannot be paginated (a diff, a graph, a timeline) is capped and says so (``truncated``). The
time predicate is the one retrieval's and ``list_facts``' as-of use (bi-temporal columns), so a
diff agrees with the as-of pages on what memory held at an instant.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from engramdb.domain.agent_id import check_agent_id
from engramdb.domain.keys import agent_aggregate_id
from engramdb.services.management.inspect_models import (
    AgentOverview,
    Community,
    EntityGraph,
    ErasureMarker,
    FactChange,
    FactsDiff,
    GraphEdge,
    GraphNode,
    JobRunItem,
    PatternItem,
    SessionItem,
    Timeline,
)
from engramdb.services.management.models import (
    FactItem,
    Page,
    PageParams,
    decode_cursor,
    encode_cursor,
)
from engramdb.services.management.queries import agent_scope
from engramdb.services.retrieve.signals.shared import escape_like

COUNT_CAP = 10_000  # the agent list's counts stop here ("10,000+")

_FACT_COLUMNS = (
    "f.fact_id, f.entity_key, f.attribute_key, f.fact_text AS text, f.category, f.confidence, "
    "f.status, f.valid_from, f.valid_to, f.recorded_at, f.invalidated_at, "
    "f.reinforcement_count, f.supersedes_fact_id, f.superseded_by, f.source_message_ids, "
    "f.decided_by, f.speaker"
)


def _visible(param: str) -> str:
    """``services.retrieve.signals.shared``'s as-of predicate, for a named instant parameter
    (a diff needs two in one statement)."""
    return (
        f"(f.recorded_at <= %({param})s AND f.valid_from <= %({param})s "
        f"AND (f.valid_to IS NULL OR f.valid_to > %({param})s) "
        f"AND (f.invalidated_at IS NULL OR f.invalidated_at > %({param})s))"
    )


def _rows(pool: ConnectionPool, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def _overview_columns(cap: int) -> str:
    """The counts of one ``mem_agents a`` row, each stopping at ``cap`` + 1 rows: 50 agents
    of 100k facts would otherwise cost 50 full index ranges. Every count is an index-only
    range (active facts: the partial index ``valid_to IS NULL``, which every end of a fact
    sets); the last turn is the top of ``mem_messages_time``."""

    def counted(rows: str) -> str:
        return f"(SELECT count(*) FROM (SELECT 1 FROM {rows} LIMIT {int(cap) + 1}) x)"

    return (
        "a.agent_id, a.opened_at, "
        f"{counted('mem_facts f WHERE f.agent_id = a.agent_id AND f.valid_to IS NULL')} "
        "AS active_facts, "
        f"{counted('mem_entities e WHERE e.agent_id = a.agent_id AND e.merged_into IS NULL')} "
        "AS entities, "
        f"{counted('mem_messages m WHERE m.agent_id = a.agent_id')} AS messages, "
        "(SELECT max(m.occurred_at) FROM mem_messages m WHERE m.agent_id = a.agent_id) "
        "AS last_activity, "
        f"{counted('mem_extraction_pending p WHERE p.agent_id = a.agent_id')} AS pending, "
        "(SELECT max(g.forgotten_at) FROM mem_forgotten g WHERE g.agent_id = a.agent_id) "
        "AS forgotten_at"
    )


def agent_overviews(
    pool: ConnectionPool,
    page: PageParams,
    search: str | None = None,
    cap: int = COUNT_CAP,
    patterns: Sequence[str] | None = None,
) -> Page[AgentOverview]:
    """Agents by ``agent_id`` whose id contains ``search``, each with its counts (capped:
    the page says "10,000+"). ``patterns``: only the agents a key covers, in SQL, so a
    tenant's page is full and exact (issue 28's rule for ``GET /v1/agents``)."""
    params: dict[str, Any] = {"n": page.limit + 1, "c": ""}
    where = ["a.agent_id > %(c)s"]
    scope = agent_scope(patterns, params)
    if scope:
        where.append(scope.removeprefix("AND ").strip())
    if page.cursor is not None:
        (params["c"],) = decode_cursor(page.cursor, (str,))
    if search:
        params["pat"] = f"%{escape_like(search)}%"
        where.append("a.agent_id ILIKE %(pat)s")
    rows = _rows(
        pool,
        f"SELECT {_overview_columns(cap)} FROM mem_agents a WHERE {' AND '.join(where)} "
        "ORDER BY a.agent_id LIMIT %(n)s",
        params,
    )
    items = [AgentOverview.model_validate({**r, "capped_at": cap}) for r in rows]
    more = len(items) > page.limit
    items = items[: page.limit]
    return Page[AgentOverview](
        items=items, next_cursor=encode_cursor(items[-1].agent_id) if more else None
    )


def agent_overview(
    pool: ConnectionPool, agent_id: str, cap: int = COUNT_CAP
) -> AgentOverview | None:
    """One agent's counts (capped like the list's); ``None`` if it has no memory."""
    check_agent_id(agent_id)
    rows = _rows(
        pool,
        f"SELECT {_overview_columns(cap)} FROM mem_agents a WHERE a.agent_id = %(a)s LIMIT 1",
        {"a": agent_id},
    )
    return AgentOverview.model_validate({**rows[0], "capped_at": cap}) if rows else None


def agent_timeline(pool: ConnectionPool, agent_id: str, limit: int = 200) -> Timeline:
    """Up to ``limit`` decision instants of the agent (a fact recorded or ended), in order:
    all of them when there are fewer, else evenly spaced quantiles (one pass, no full list)."""
    check_agent_id(agent_id)
    fractions = [i / max(1, limit - 1) for i in range(limit)]
    rows = _rows(
        pool,
        "WITH t AS (SELECT f.recorded_at AS at FROM mem_facts f WHERE f.agent_id = %(a)s "
        "UNION ALL SELECT f.invalidated_at FROM mem_facts f WHERE f.agent_id = %(a)s "
        "AND f.invalidated_at IS NOT NULL) "
        "SELECT percentile_disc(%(fr)s::float8[]) WITHIN GROUP (ORDER BY at) AS qs, "
        "min(at) AS first, max(at) AS last FROM t",
        {"a": agent_id, "fr": fractions},
    )
    row = rows[0] if rows else {}
    instants = sorted(set(row.get("qs") or []))
    return Timeline(instants=instants, first=row.get("first"), last=row.get("last"))


def facts_diff(
    pool: ConnectionPool, agent_id: str, t1: datetime, t2: datetime, limit: int = 200
) -> FactsDiff:
    """Facts held at ``t2`` but not ``t1`` (added) and at ``t1`` but not ``t2`` (removed);
    a removed fact superseded by an added one is a change. Capped at ``limit`` per side."""
    check_agent_id(agent_id)
    params = {"a": agent_id, "t1": t1, "t2": t2, "n": limit + 1}
    sql = (
        f"SELECT {_FACT_COLUMNS} FROM mem_facts f WHERE f.agent_id = %(a)s "
        "AND {now} AND NOT {then} ORDER BY f.recorded_at, f.fact_id LIMIT %(n)s"
    )
    added_rows = _rows(pool, sql.format(now=_visible("t2"), then=_visible("t1")), params)
    removed_rows = _rows(pool, sql.format(now=_visible("t1"), then=_visible("t2")), params)
    truncated = len(added_rows) > limit or len(removed_rows) > limit
    added = [FactItem.model_validate(r) for r in added_rows[:limit]]
    removed = [FactItem.model_validate(r) for r in removed_rows[:limit]]
    by_id = {f.fact_id: f for f in added}
    successors = _successors(pool, agent_id, [f.fact_id for f in removed if f.superseded_by])
    changed: list[FactChange] = []
    for old in list(removed):
        # the fact that replaced it may be several supersessions later (t1 -> ... -> t2)
        new = next((by_id[s] for s in successors.get(old.fact_id, []) if s in by_id), None)
        if new is not None:
            changed.append(FactChange(before=old, after=new))
            removed.remove(old)
            added.remove(new)
            del by_id[new.fact_id]
    return FactsDiff(t1=t1, t2=t2, added=added, removed=removed, changed=changed,
                     truncated=truncated)


def _successors(pool: ConnectionPool, agent_id: str, fact_ids: list[str]) -> dict[str, list[str]]:
    """For each fact, the facts that superseded it in turn (nearest first, 20 at most)."""
    if not fact_ids:
        return {}
    rows = _rows(
        pool,
        "WITH RECURSIVE chain(origin, fid, depth) AS ("
        "SELECT f.fact_id, f.superseded_by, 1 FROM mem_facts f WHERE f.agent_id = %(a)s "
        "AND f.fact_id = ANY(%(ids)s) AND f.superseded_by IS NOT NULL "
        "UNION ALL SELECT c.origin, f.superseded_by, c.depth + 1 FROM chain c "
        "JOIN mem_facts f ON f.agent_id = %(a)s AND f.fact_id = c.fid "
        "WHERE f.superseded_by IS NOT NULL AND c.depth < 20) "
        "SELECT origin, fid FROM chain ORDER BY origin, depth",
        {"a": agent_id, "ids": fact_ids},
    )
    found: dict[str, list[str]] = {}
    for row in rows:
        found.setdefault(row["origin"], []).append(row["fid"])
    return found


def entity_graph(
    pool: ConnectionPool, agent_id: str, center: str | None = None, limit: int = 60
) -> EntityGraph:
    """The strongest ``limit`` relationships (those touching ``center`` when given), their
    entities with active-fact counts, and the communities holding those entities."""
    check_agent_id(agent_id)
    params: dict[str, Any] = {"a": agent_id, "n": limit + 1, "c": center}
    around = " AND (r.source_key = %(c)s OR r.target_key = %(c)s)" if center else ""
    edges = [
        GraphEdge.model_validate(r)
        for r in _rows(
            pool,
            "SELECT r.source_key, r.target_key, r.relation_type, r.strength, r.mentions "
            f"FROM mem_relationships r WHERE r.agent_id = %(a)s{around} "
            "ORDER BY r.strength DESC, r.mentions DESC, r.source_key, r.target_key LIMIT %(n)s",
            params,
        )
    ]
    truncated = len(edges) > limit
    edges = edges[:limit]
    keys = sorted({k for e in edges for k in (e.source_key, e.target_key)} | ({center} if center else set()))
    if not keys and center is None:  # no relationship yet: show the entities with most facts
        keys = [r["entity_key"] for r in _rows(
            pool,
            "SELECT e.entity_key FROM mem_entities e WHERE e.agent_id = %(a)s "
            "AND e.merged_into IS NULL ORDER BY e.created_at, e.entity_key LIMIT %(n)s",
            {"a": agent_id, "n": min(limit, 30)},
        )]
    communities = [
        Community.model_validate(r)
        for r in _rows(
            pool,
            "SELECT community_id, label, method, members FROM mem_communities "
            "WHERE agent_id = %(a)s AND members && %(k)s::text[] ORDER BY community_id LIMIT 50",
            {"a": agent_id, "k": keys},
        )
    ]
    member_of = {m: c.community_id for c in communities for m in c.members}
    nodes = [
        GraphNode.model_validate({**r, "community": member_of.get(r["entity_key"])})
        for r in _rows(
            pool,
            "SELECT e.entity_key, e.display_name, e.entity_type, "
            "(SELECT count(*) FROM mem_fact_entities fe JOIN mem_facts f ON f.agent_id = "
            "fe.agent_id AND f.fact_id = fe.fact_id AND f.status = 'active' "
            "WHERE fe.agent_id = e.agent_id AND fe.entity_key = e.entity_key) AS active_facts "
            "FROM mem_entities e WHERE e.agent_id = %(a)s AND e.entity_key = ANY(%(k)s) "
            "ORDER BY e.entity_key",
            {"a": agent_id, "k": keys},
        )
    ]
    return EntityGraph(center=center, nodes=nodes, edges=edges, communities=communities,
                       truncated=truncated)


def list_patterns(pool: ConnectionPool, agent_id: str, limit: int = 50) -> list[PatternItem]:
    """The patterns the consolidation job found, most confident first (capped)."""
    check_agent_id(agent_id)
    return [
        PatternItem.model_validate(r)
        for r in _rows(
            pool,
            "SELECT pattern_id, pattern_text AS text, kind, method, confidence, "
            "supporting_fact_ids, recorded_at FROM mem_patterns WHERE agent_id = %(a)s "
            "ORDER BY confidence DESC, pattern_id LIMIT %(n)s",
            {"a": agent_id, "n": limit},
        )
    ]


def list_sessions(pool: ConnectionPool, agent_id: str, limit: int = 100) -> list[SessionItem]:
    """The agent's sessions with their turn counts, most recent first (capped)."""
    check_agent_id(agent_id)
    return [
        SessionItem.model_validate(r)
        for r in _rows(
            pool,
            "SELECT session_id, count(*) AS messages, min(occurred_at) AS first_at, "
            "max(occurred_at) AS last_at FROM mem_messages WHERE agent_id = %(a)s "
            "GROUP BY session_id ORDER BY max(occurred_at) DESC LIMIT %(n)s",
            {"a": agent_id, "n": limit},
        )
    ]


def list_job_runs(pool: ConnectionPool, limit: int = 100) -> list[JobRunItem]:
    """The latest run of each (job, agent), newest first; empty before any job ran."""
    try:
        return [
            JobRunItem.model_validate(r)
            for r in _rows(
                pool,
                "SELECT job, agent_id, status, error, events, duration_ms, started_at, runs, "
                "failures FROM mem_job_runs ORDER BY started_at DESC LIMIT %(n)s",
                {"n": limit},
            )
        ]
    except psycopg.errors.UndefinedTable:
        return []


def erasure_markers(pool: ConnectionPool, limit: int = 100) -> list[ErasureMarker]:
    """Destroyed data keys (ADR-0018), newest first."""
    try:
        rows = _rows(
            pool,
            "SELECT key_id::text AS key_id, erased_at FROM engramdb_data_keys "
            "WHERE data_key IS NULL ORDER BY erased_at DESC NULLS LAST LIMIT %(n)s",
            {"n": limit},
        )
    except psycopg.errors.UndefinedTable:
        return []
    return [ErasureMarker.model_validate(r) for r in rows]


def erasure_of(pool: ConnectionPool, agent_id: str) -> ErasureMarker | None:
    """The agent's erasure marker, or ``None`` if its data key was never destroyed."""
    key: UUID = agent_aggregate_id(agent_id)
    try:
        rows = _rows(
            pool,
            "SELECT key_id::text AS key_id, erased_at FROM engramdb_data_keys "
            "WHERE key_id = %(k)s AND data_key IS NULL",
            {"k": key},
        )
    except psycopg.errors.UndefinedTable:
        return None
    return ErasureMarker.model_validate(rows[0]) if rows else None
