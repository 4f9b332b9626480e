"""Reading memory for people and tools: list facts, get one with its provenance, list
entities, agents and messages — from the read models only (``mem_*``; docs/read-models.md).

Why read models and not the log: they are indexed by agent and hold the current state
(status, supersession, sources) already folded; the log stays the source for history and
as-of replays (``services/management/audit.py``). ``FactFilter.as_of`` uses the facts' bi-temporal
columns, the same predicate retrieval's as-of uses, so no replay is needed.

Every list is keyset-paginated on a stable sort key (no OFFSET: a page costs the same deep
in the list, and rows added meanwhile do not shift later pages).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from engramdb.domain.agent_id import check_agent_id
from engramdb.domain.keys import match_key
from engramdb.services.management.metadata_filter import MetadataFilter
from engramdb.services.management.models import (
    AgentItem,
    EntityItem,
    FactDetail,
    FactFilter,
    FactItem,
    MessageFilter,
    MessageItem,
    NotFoundError,
    Page,
    PageParams,
    SourceMessage,
    decode_cursor,
    encode_cursor,
)
from engramdb.services.retrieve.signals.shared import escape_like, fact_visibility

_FACT_COLUMNS = (
    "f.fact_id, f.entity_key, f.attribute_key, f.fact_text AS text, f.category, f.confidence, "
    "f.status, f.valid_from, f.valid_to, f.recorded_at, f.invalidated_at, "
    "f.reinforcement_count, f.supersedes_fact_id, f.superseded_by, f.source_message_ids, "
    "f.decided_by, f.speaker, "
    # a fact inherits its source turns' metadata (issue 24): a key's value comes from the
    # earliest source that has it (the fact's own message first), read from the fact's copy
    # of its source turns' scopes (``fact_scope_tests``)
    "(SELECT coalesce(jsonb_object_agg(kv.key, kv.value), '{}'::jsonb) FROM ("
    "SELECT DISTINCT ON (e.key) e.key, e.value FROM jsonb_array_elements(f.source_scope) "
    "WITH ORDINALITY s(turn, ord), jsonb_each(coalesce(s.turn -> 'm', '{}'::jsonb)) e "
    "ORDER BY e.key, s.ord) kv) AS metadata"
)


def fact_scope_tests(params: dict[str, Any], session: str | None = None,
                     metadata: MetadataFilter | None = None) -> list[str]:
    """Predicates over the fact ``f``: ONE of its source turns is in ``session``; ONE (maybe
    another) of them matches ``metadata``.

    A session, and a filter of ANDed equalities (Mem0's usual ``{"user_id": ...}``) — or an
    ``in`` / ``OR`` of a few such (``MetadataFilter.branches``, one containment each, ORed) —
    are each containments of the fact's own copy of its source
    turns' scopes (``mem_facts.source_scope``: ``{"s": session, "m": metadata}`` per source
    turn the memory model has seen, in source order, ADR-0047), which its GIN index answers
    and the planner estimates from the column's statistics. Through ``mem_messages`` a page
    of a 2 % filter at 100k facts took 154–182 ms once prepared, a filter no turn matches
    94 ms; through the copy 2.9–3.4 ms and 0.7 ms. Other trees (NOT, ne, nin, contains, ...)
    keep the source-turn test: tested on each copied turn instead, a filter nothing passes
    costs the whole agent's facts one by one (195 vs 39 ms, where the planner semi-joins the
    few passing turns)."""
    tests: list[str] = []
    if session is not None:
        params["scope_session"] = json.dumps([{"s": session}])
        tests.append("f.source_scope @> %(scope_session)s::jsonb")
    if metadata is not None:
        branches = metadata.branches()
        if branches is not None:
            names = [f"scope_metadata_{i}" if i else "scope_metadata" for i in range(len(branches))]
            params.update({name: json.dumps([{"m": b}]) for name, b in zip(names, branches, strict=True)})
            tests.append("(" + " OR ".join(f"f.source_scope @> %({name})s::jsonb" for name in names) + ")")
        else:
            tests.append("EXISTS (SELECT 1 FROM mem_messages sm WHERE sm.agent_id = f.agent_id "
                         f"AND sm.message_id = ANY(f.source_message_ids) AND ({metadata.sql('sm.metadata', params)}))")
    return tests


# a turn is hidden from retrieval when a retraction or "forget the agent" hid it (ADR-0016)
_HIDDEN = (
    "(EXISTS (SELECT 1 FROM mem_hidden_messages h WHERE h.agent_id = m.agent_id "
    "AND h.message_id = m.message_id) OR EXISTS (SELECT 1 FROM mem_forgotten g "
    "WHERE g.agent_id = m.agent_id AND g.forgotten_at >= m.recorded_at))"
)


def _rows(pool: ConnectionPool, sql: str, params: dict[str, Any],
          custom_plan: bool = False) -> list[dict[str, Any]]:
    """``custom_plan``: never prepared, so planned with the values (a filter's share of the
    rows decides between walking the keyset index and the scopes' GIN index; a generic plan
    would fix one choice for every value)."""
    with pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute(sql, params, prepare=False if custom_plan else None)
        return cur.fetchall()


def _page(items: list[Any], limit: int, key: Any) -> dict[str, Any]:
    more = len(items) > limit
    items = items[:limit]
    return {"items": items, "next_cursor": encode_cursor(*key(items[-1])) if more else None}


def resolve_entity(pool: ConnectionPool, agent_id: str, name: str) -> list[str]:
    """Entity keys ``name`` denotes: a key, else a name or alias (folded), followed through
    merges; merged-away keys are included so facts projected before a merge still match."""
    rows = _rows(
        pool,
        "SELECT entity_key FROM mem_entities WHERE agent_id = %(a)s AND entity_key = %(n)s "
        "UNION SELECT entity_key FROM mem_aliases WHERE agent_id = %(a)s AND alias_folded = %(f)s",
        {"a": agent_id, "n": name, "f": match_key(name)},
    )
    keys = {r["entity_key"] for r in rows}
    if keys:
        merged = _rows(
            pool,
            "SELECT entity_key, merged_into FROM mem_entities WHERE agent_id = %(a)s "
            "AND (entity_key = ANY(%(k)s) OR merged_into = ANY(%(k)s))",
            {"a": agent_id, "k": sorted(keys)},
        )
        keys |= {r["entity_key"] for r in merged} | {r["merged_into"] for r in merged if r["merged_into"]}
    return sorted(keys)


def list_facts(
    pool: ConnectionPool, agent_id: str, flt: FactFilter, metadata: MetadataFilter | None = None
) -> Page[FactItem]:
    """``metadata``: only facts one of whose source turns matches it, decided in SQL."""
    check_agent_id(agent_id)
    params: dict[str, Any] = {"a": agent_id, "n": flt.limit + 1}
    where = ["f.agent_id = %(a)s"]
    where += fact_scope_tests(params, flt.session, metadata)
    status = flt.status or ("all" if flt.valid_at or flt.as_of else "active")
    if status != "all":
        where.append("f.status = %(status)s")
        params["status"] = status
    if flt.entity is not None:
        params["ents"] = resolve_entity(pool, agent_id, flt.entity)
        where.append(
            "EXISTS (SELECT 1 FROM mem_fact_entities fe WHERE fe.agent_id = f.agent_id "
            "AND fe.fact_id = f.fact_id AND fe.entity_key = ANY(%(ents)s))"
        )
    if flt.speaker is not None:
        params["speaker"] = flt.speaker.lower()
        where.append("lower(f.speaker) = %(speaker)s")
    if flt.valid_at is not None:
        params["v"] = flt.valid_at
        where.append("f.valid_from <= %(v)s AND (f.valid_to IS NULL OR f.valid_to > %(v)s)")
    if flt.as_of is not None:
        params["t"] = flt.as_of
        where.append(fact_visibility(flt.as_of))
    if flt.text is not None:
        params["pat"] = f"%{escape_like(flt.text)}%"
        where.append("f.fact_text ILIKE %(pat)s")
    if flt.category is not None:
        params["category"] = flt.category
        where.append("f.category = %(category)s")
    if flt.cursor is not None:
        params["c0"], params["c1"] = decode_cursor(flt.cursor, (datetime, str))
        where.append("(f.recorded_at, f.fact_id) > (%(c0)s, %(c1)s)")
    rows = _rows(
        pool,
        f"SELECT {_FACT_COLUMNS} FROM mem_facts f WHERE {' AND '.join(where)} "
        "ORDER BY f.recorded_at, f.fact_id LIMIT %(n)s",
        params,
        custom_plan=flt.session is not None or metadata is not None,
    )
    items = [FactItem.model_validate(r) for r in rows]
    return Page[FactItem](**_page(items, flt.limit, lambda f: (f.recorded_at, f.fact_id)))


def get_fact(pool: ConnectionPool, agent_id: str, fact_id: str) -> FactDetail:
    """One fact (any status) with its source turns; ``NotFoundError`` if the agent never had it."""
    check_agent_id(agent_id)
    if "\x00" in fact_id:  # PostgreSQL text cannot hold it, so no fact has it
        raise NotFoundError(f"agent {agent_id!r} has no fact {fact_id!r}")
    rows = _rows(
        pool,
        f"SELECT {_FACT_COLUMNS}, ARRAY(SELECT fe.entity_key FROM mem_fact_entities fe "
        "WHERE fe.agent_id = f.agent_id AND fe.fact_id = f.fact_id AND NOT fe.is_primary "
        "ORDER BY fe.entity_key) AS linked_entities "
        "FROM mem_facts f WHERE f.agent_id = %(a)s AND f.fact_id = %(f)s",
        {"a": agent_id, "f": fact_id},
    )
    if not rows:
        raise NotFoundError(f"agent {agent_id!r} has no fact {fact_id!r}")
    row = rows[0]
    found = {
        r["message_id"]: r
        for r in _rows(
            pool,
            f"SELECT m.message_id, m.text, m.speaker, m.session_id, m.occurred_at, m.metadata, {_HIDDEN} "
            "AS hidden FROM mem_messages m WHERE m.agent_id = %(a)s AND m.message_id = ANY(%(ids)s)",
            {"a": agent_id, "ids": row["source_message_ids"]},
        )
    }
    sources = [
        SourceMessage.model_validate(found[mid]) if mid in found else SourceMessage(message_id=mid)
        for mid in row["source_message_ids"]
    ]
    return FactDetail.model_validate(
        {**row, "sources": sources, "history": f"/v1/agents/{agent_id}/facts/{fact_id}/history"}
    )


def list_entities(pool: ConnectionPool, agent_id: str, page: PageParams,
                  metadata: MetadataFilter | None = None) -> Page[EntityItem]:
    """The agent's entities (merged-away ones excluded), by ``entity_key``. ``metadata``: only
    entities an active fact drawn from a matching turn is about (a fact inherits its source
    turns' metadata, issue 24), their ``active_facts`` counting those facts alone — in SQL,
    under the keyset LIMIT."""
    check_agent_id(agent_id)
    params: dict[str, Any] = {"a": agent_id, "n": page.limit + 1, "c": ""}
    if page.cursor is not None:
        (params["c"],) = decode_cursor(page.cursor, (str,))
    passing = "".join(f" AND {t}" for t in fact_scope_tests(params, metadata=metadata))
    about = ("FROM mem_fact_entities fe JOIN mem_facts f ON f.agent_id = fe.agent_id "
             "AND f.fact_id = fe.fact_id AND f.status = 'active' WHERE fe.agent_id = e.agent_id "
             f"AND fe.entity_key = e.entity_key{passing}")
    active = f"(SELECT count(*) {about})"
    # filtered: an entity passes at its first passing fact (EXISTS stops there); the count is
    # only computed for the page's rows
    rows = _rows(
        pool,
        "SELECT e.entity_key, e.display_name, e.entity_type, e.created_at, "
        "ARRAY(SELECT al.alias FROM mem_aliases al WHERE al.agent_id = e.agent_id "
        "AND al.entity_key = e.entity_key ORDER BY al.alias) AS aliases, "
        f"{active} AS active_facts, e.profile_text AS profile, "
        "e.profile_method, e.profile_refreshed_at "
        "FROM mem_entities e WHERE e.agent_id = %(a)s AND e.merged_into IS NULL "
        f"AND e.entity_key > %(c)s{'' if metadata is None else f' AND EXISTS (SELECT 1 {about})'} "
        "ORDER BY e.entity_key LIMIT %(n)s",
        params,
        custom_plan=metadata is not None,
    )
    items = [EntityItem.model_validate(r) for r in rows]
    return Page[EntityItem](**_page(items, page.limit, lambda e: (e.entity_key,)))


def agent_scope(patterns: Sequence[str] | None, params: dict[str, Any]) -> str:
    """SQL restricting ``a.agent_id`` to ``patterns`` (exact ids, ``prefix*``; ``*`` or
    ``None``: all), in SQL so that keyset paging stays exact (issue 28: a tenant's key lists
    only its tenant)."""
    if patterns is None or "*" in patterns:
        return ""
    params["exact"] = [p for p in patterns if not p.endswith("*")]
    params["prefixes"] = [escape_like(p[:-1]) + "%" for p in patterns if p.endswith("*")]
    return "AND (a.agent_id = ANY(%(exact)s) OR a.agent_id LIKE ANY(%(prefixes)s)) "


def list_agents(
    pool: ConnectionPool, page: PageParams, patterns: Sequence[str] | None = None
) -> Page[AgentItem]:
    """Agents with memory, by ``agent_id`` (it spans agents: ``patterns`` narrows it to the
    caller's, e.g. an API key's agents)."""
    params: dict[str, Any] = {"n": page.limit + 1, "c": ""}
    scope = agent_scope(patterns, params)
    if page.cursor is not None:
        (params["c"],) = decode_cursor(page.cursor, (str,))
    rows = _rows(
        pool,
        "SELECT a.agent_id, a.opened_at, "
        "(SELECT count(*) FROM mem_facts f WHERE f.agent_id = a.agent_id "
        "AND f.status = 'active') AS active_facts, "
        "(SELECT count(*) FROM mem_messages m WHERE m.agent_id = a.agent_id) AS messages, "
        "(SELECT max(g.forgotten_at) FROM mem_forgotten g WHERE g.agent_id = a.agent_id) "
        "AS forgotten_at FROM mem_agents a WHERE a.agent_id > %(c)s "
        + scope
        + "ORDER BY a.agent_id LIMIT %(n)s",
        params,
    )
    items = [AgentItem.model_validate(r) for r in rows]
    return Page[AgentItem](**_page(items, page.limit, lambda a: (a.agent_id,)))


def list_messages(
    pool: ConnectionPool, agent_id: str, flt: MessageFilter, metadata: MetadataFilter | None = None
) -> Page[MessageItem]:
    """The agent's recorded turns (hidden ones included and marked), by ``occurred_at``."""
    check_agent_id(agent_id)
    params: dict[str, Any] = {"a": agent_id, "n": flt.limit + 1}
    where = ["m.agent_id = %(a)s"]
    if metadata is not None:
        where.append(metadata.sql("m.metadata", params))
    if flt.session is not None:
        params["session"] = flt.session
        where.append("m.session_id = %(session)s")
    if flt.speaker is not None:
        params["speaker"] = flt.speaker.lower()
        where.append("lower(m.speaker) = %(speaker)s")
    if flt.cursor is not None:
        params["c0"], params["c1"] = decode_cursor(flt.cursor, (datetime, str))
        where.append("(m.occurred_at, m.message_id) > (%(c0)s, %(c1)s)")
    rows = _rows(
        pool,
        "SELECT m.message_id, m.session_id, m.speaker, m.text, m.occurred_at, m.recorded_at, "
        f"m.processed, m.extractor, m.extraction_error, m.metadata, {_HIDDEN} AS hidden, "
        "m.emotion, m.emotion_intensity, m.emotion_detector "
        f"FROM mem_messages m WHERE {' AND '.join(where)} "
        "ORDER BY m.occurred_at, m.message_id LIMIT %(n)s",
        params,
    )
    items = [MessageItem.model_validate(r) for r in rows]
    return Page[MessageItem](**_page(items, flt.limit, lambda m: (m.occurred_at, m.message_id)))
