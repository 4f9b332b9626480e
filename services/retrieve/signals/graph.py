"""The graph signal: BFS over relationships from the query's entities, the facts linked to
each reached entity (link table, else ``entity_key``) and entity specificity (IDF), which
spreading activation (``spreading_activation``) and aggregation reuse."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.planner import Edge, load_edges
from engramdb.services.retrieve.signals.hydrate import floored_decay
from engramdb.services.retrieve.signals.shared import (
    DF_CAP,
    N_CAP,
    Narrowing,
    batch,
    fact_visibility,
    narrowing_params,
)


@dataclass(frozen=True)
class GraphNode:
    key: str
    hop: int  # BFS distance from a query entity (0 = named in the query)
    edge_strength: float  # 1.0 at hop 0; normalised strength of the path's edges
    edge_seen: datetime | None  # last_seen_at of the edge that reached it
    in_query: bool


@dataclass(frozen=True)
class GraphHit:
    fact_id: str
    node: GraphNode
    structural: float  # edge_strength × edge_recency × query_bonus × hop_decay (recency of the fact applied in rank)


def strength_factor(strength: float) -> float:
    """A co-mention count-like ``strength`` (1.0 on first sight) onto (0, 1]: 0.75 once, 1.0
    from the second co-mention on."""
    return max(0.0, min(1.0, 0.5 + 0.25 * strength))


def bfs(
    conn: Any,
    agent_id: str,
    seeds: dict[str, bool],
    first_edges: list[Edge],
    hops: int,
    as_of: datetime | None,
    per_entity: int,
) -> dict[str, GraphNode]:
    """BFS over relationships (both directions) up to ``hops``; ``seeds`` maps entity key to
    "named in the query". ``first_edges`` (loaded by the planner) saves the first round trip."""
    nodes = {k: GraphNode(k, 0, 1.0, None, in_q) for k, in_q in seeds.items()}
    frontier = sorted(seeds)
    for hop in range(1, hops + 1):
        if not frontier:
            break
        if hop == 1 and first_edges:
            known = {e.seed for e in first_edges}
            edges = [e for e in first_edges if e.seed in seeds]
            missing = [k for k in frontier if k not in known]
            if missing:
                edges += load_edges(conn, agent_id, missing, as_of, per_entity)[0]
        else:
            edges = load_edges(conn, agent_id, frontier, as_of, per_entity)[0]
        nxt: dict[str, GraphNode] = {}
        for e in sorted(edges, key=lambda e: (e.seed, -e.strength, e.neighbour)):
            if e.neighbour in nodes:
                continue
            parent = nodes[e.seed]
            cand = GraphNode(e.neighbour, hop, parent.edge_strength * strength_factor(e.strength), e.last_seen_at, False)
            best = nxt.get(e.neighbour)
            if best is None or cand.edge_strength > best.edge_strength:
                nxt[e.neighbour] = cand
        nodes.update(nxt)
        frontier = sorted(nxt)
    return nodes


def _linked_facts_cursor(
    conn: Any,
    agent_id: str,
    keys: list[str],
    per_entity: int | list[int],
    cfg: RetrieveConfig,
    as_of: datetime | None,
    order: str = "recent",
    scope: Narrowing | None = None,
) -> Any:
    """(entity_key, fact_id) for facts that *mention* each entity through the fact↔entity
    link table (not only the primary subject); falls back to ``entity_key`` matching when
    the agent has no links at all (memories projected before links existed).
    ``per_entity`` is one limit for all keys or one per key."""
    limits = per_entity if isinstance(per_entity, list) else [per_entity] * len(keys)
    pairs = [(k, n) for k, n in zip(keys, limits, strict=True) if n > 0]
    if not pairs:
        return None
    keys, limits = [k for k, _ in pairs], [n for _, n in pairs]
    order_sql = (
        "f.valid_from DESC, f.fact_id"
        if order == "recent"
        else "f.importance DESC, f.reinforcement_count DESC, f.valid_from DESC, f.fact_id"
    )
    # whether the agent has links at all is decided inside the statement (one-time filter),
    # not by a separate round trip
    inner = f"""
        (SELECT f.fact_id, f.valid_from, f.importance, f.reinforcement_count
           FROM mem_fact_entities fe
           JOIN mem_facts f ON f.agent_id = fe.agent_id AND f.fact_id = fe.fact_id
          WHERE (SELECT v FROM hl) AND fe.agent_id = %(a)s AND fe.entity_key = k.key
            AND {fact_visibility(as_of, scope=scope)} AND f.confidence >= %(minc)s
          ORDER BY {order_sql} LIMIT k.lim)
        UNION ALL
        (SELECT f.fact_id, f.valid_from, f.importance, f.reinforcement_count
           FROM mem_facts f
          WHERE NOT (SELECT v FROM hl) AND f.agent_id = %(a)s AND f.entity_key = k.key
            AND {fact_visibility(as_of, scope=scope)} AND f.confidence >= %(minc)s
          ORDER BY {order_sql} LIMIT k.lim)"""
    return conn.execute(
        "WITH hl AS (SELECT EXISTS (SELECT 1 FROM mem_fact_entities WHERE agent_id = %(a)s) AS v) "
        f"SELECT k.key, x.fact_id FROM unnest(%(k)s::text[], %(n)s::int[]) AS k(key, lim) CROSS JOIN LATERAL ({inner}) x",
        {"a": agent_id, "k": keys, "t": as_of, "minc": cfg.filters.min_confidence, "n": limits,
         **narrowing_params(scope)},
    )


def linked_with_specificity(
    conn: Any,
    agent_id: str,
    keys: list[str],
    per_entity: int | list[int],
    cfg: RetrieveConfig,
    as_of: datetime | None,
    order: str = "recent",
    scope: Narrowing | None = None,
) -> tuple[list[tuple[str, str]], dict[str, float]]:
    """The linked facts (``_linked_facts_cursor``) and ``entity_specificity`` of the same keys, sent together in one
    round trip (pipeline): graph and spreading need both and neither depends on the other."""
    with batch(conn):
        spec_cur = _specificity_cursor(conn, agent_id, keys)
        linked_cur = _linked_facts_cursor(conn, agent_id, keys, per_entity, cfg, as_of, order, scope)
    specific = _specificity_from(spec_cur.fetchall()) if spec_cur is not None else {}
    linked = [(r[0], r[1]) for r in linked_cur.fetchall()] if linked_cur is not None else []
    return linked, specific


def entity_specificity(conn: Any, agent_id: str, keys: list[str]) -> dict[str, float]:
    """How much being linked to an entity says about a fact: the entity's IDF over the
    agent's facts, scaled to [0, 1] (1 = an entity with one fact). Without it, naming a hub
    (the user, a speaker every other fact is about) promoted all of its facts alike: graph and
    spreading then cost LoCoMo Recall@10 more than half (62 → 31, ADR 0006)."""
    cur = _specificity_cursor(conn, agent_id, keys)
    return {} if cur is None else _specificity_from(cur.fetchall())


def _specificity_cursor(conn: Any, agent_id: str, keys: list[str]) -> Any:
    if not keys:
        return None
    return conn.execute(
        f"""
        SELECT k.key,
               (SELECT count(*) FROM (SELECT 1 FROM mem_fact_entities l
                                       WHERE l.agent_id = %(a)s AND l.entity_key = k.key
                                       LIMIT {DF_CAP}) x),
               (SELECT count(*) FROM (SELECT 1 FROM mem_facts f WHERE f.agent_id = %(a)s
                                       LIMIT {N_CAP}) y)
          FROM unnest(%(keys)s::text[]) AS k(key)
        """,
        {"a": agent_id, "keys": keys},
    )


def _specificity_from(rows: list[tuple[Any, ...]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, linked, total in rows:
        if not linked:
            out[key] = 1.0  # no links (entity_key fallback): nothing to measure
            continue
        best = math.log(1.0 + (total - 1 + 0.5) / 1.5)
        idf = math.log(1.0 + (total - linked + 0.5) / (linked + 0.5))
        out[key] = max(0.0, min(1.0, idf / best)) if best > 0 else 1.0
    return out


def graph_facts(
    conn: Any,
    agent_id: str,
    seeds: dict[str, bool],
    first_edges: list[Edge],
    cfg: RetrieveConfig,
    as_of: datetime | None,
    anchor: datetime,
    broad: bool,
    scope: Narrowing | None = None,
) -> tuple[list[GraphHit], dict[str, GraphNode]]:
    if not seeds:
        return [], {}
    nodes = bfs(conn, agent_id, seeds, first_edges, cfg.graph.graph_hops, as_of, cfg.graph.graph_neighbours_per_entity)
    # budget: the named entities get graph_facts_per_entity facts, each hop a quarter of the
    # previous hop's share (20 / 5 / 1 by default), broad queries × broad_query_multiplier
    base = cfg.graph.graph_facts_per_entity * (cfg.planner.broad_query_multiplier if broad else 1)
    keys = sorted(nodes)
    limits = [max(1, base // (4 ** nodes[k].hop)) for k in keys]
    best: dict[str, GraphHit] = {}
    linked, specific = linked_with_specificity(conn, agent_id, keys, limits, cfg, as_of, scope=scope)
    for key, fact_id in linked:
        node = nodes[key]
        edge_recency = 1.0 if node.hop == 0 else floored_decay(anchor, node.edge_seen, cfg.scoring.recency_half_life_days)
        bonus = cfg.graph.graph_query_bonus if node.in_query else 1.0
        structural = (node.edge_strength * edge_recency * bonus * cfg.hop_decay(node.hop)
                      * specific.get(key, 1.0))
        hit = GraphHit(fact_id, node, structural)
        cur = best.get(fact_id)
        if cur is None or (hit.structural, -hit.node.hop) > (cur.structural, -cur.node.hop):
            best[fact_id] = hit
    hits = sorted(best.values(), key=lambda h: (-h.structural, h.fact_id))
    return hits[: cfg.candidates.candidate_pool * (cfg.planner.broad_query_multiplier if broad else 2)], nodes
