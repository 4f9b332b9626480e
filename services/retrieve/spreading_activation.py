"""Enhance (docs/spec.md §3.4): spreading activation from the best seed facts along relationships.

Activation starts at each seed's relevance on the entities the seed mentions, flows to up to
``spreading_max_related_entities`` neighbours (× decay) and once more (× decay²); every
reached entity contributes up to ``spreading_facts_per_entity`` facts (most important
first). The activation becomes the fact's ``spreading`` signal, fused into relevance like
any other signal, so a spread fact can only outrank a direct hit if it is also relevant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.planner import load_edges
from engramdb.services.retrieve.rank import Candidate
from engramdb.services.retrieve.signals import linked_with_specificity
from engramdb.services.retrieve.signals.shared import Narrowing


@dataclass
class SpreadResult:
    activation: dict[str, float] = field(default_factory=dict)  # new fact_id -> activation
    returned: int = 0
    unique: int = 0
    entities: dict[int, list[str]] = field(default_factory=dict)  # hop -> entity keys


def seed_entities(conn: Any, agent_id: str, seeds: list[Candidate]) -> dict[str, float]:
    """Entities mentioned by the seed facts (links, plus the primary subject) -> activation."""
    act: dict[str, float] = {}
    ids = [c.fact_id for c in seeds]
    rel = {c.fact_id: c.relevance for c in seeds}
    for c in seeds:
        act[c.row.entity_key] = max(act.get(c.row.entity_key, 0.0), c.relevance)
    rows = conn.execute(
        "SELECT fact_id, entity_key FROM mem_fact_entities WHERE agent_id = %s AND fact_id = ANY(%s)",
        (agent_id, ids),
    ).fetchall()
    for fid, key in rows:
        act[key] = max(act.get(key, 0.0), rel.get(fid, 0.0))
    return act


def spread(
    conn: Any,
    agent_id: str,
    ranked: list[Candidate],
    known_ids: set[str],
    cfg: RetrieveConfig,
    as_of: datetime | None,
    scope: Narrowing | None = None,
) -> SpreadResult:
    out = SpreadResult()
    if cfg.spreading.spreading_activation_hops <= 0 or cfg.spreading.spreading_facts_per_entity <= 0 or not ranked:
        return out
    seeds = ranked[: cfg.spreading.spreading_seed_facts]
    seeds = [c for c in seeds if c.relevance > 0.0]
    if not seeds:
        return out
    level = seed_entities(conn, agent_id, seeds)
    visited = set(level)
    entity_act: dict[str, float] = {}
    for hop in range(1, cfg.spreading.spreading_activation_hops + 1):
        if not level or cfg.spreading.spreading_max_related_entities <= 0:
            break
        edges, _ = load_edges(conn, agent_id, sorted(level), as_of, cfg.spreading.spreading_max_related_entities)
        cand: dict[str, float] = {}
        for e in edges:
            if e.neighbour in visited:
                continue
            value = level[e.seed] * cfg.spreading.spreading_decay_factor
            if value > cand.get(e.neighbour, 0.0):
                cand[e.neighbour] = value
        chosen = sorted(cand.items(), key=lambda kv: (-kv[1], kv[0]))[: cfg.spreading.spreading_max_related_entities]
        level = dict(chosen)
        visited.update(level)
        entity_act.update(level)
        out.entities[hop] = [k for k, _ in chosen]
    if not entity_act:
        return out
    rows, specific = linked_with_specificity(
        conn, agent_id, sorted(entity_act), cfg.spreading.spreading_facts_per_entity, cfg, as_of, order="important",
        scope=scope
    )
    out.returned = len(rows)
    for key, fid in rows:
        if fid in known_ids:
            continue
        value = entity_act[key] * specific.get(key, 1.0)
        if value > out.activation.get(fid, 0.0):
            out.activation[fid] = value
    out.unique = len(out.activation)
    return out
