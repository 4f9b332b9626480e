"""The aggregation signal: facts about entities of the types an aggregating question asks
about ("who are my friends?"), weighted by entity specificity."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.signals.graph import entity_specificity
from engramdb.services.retrieve.signals.shared import Narrowing, fact_visibility, narrowing_params


def aggregation_facts(
    conn: Any, agent_id: str, patterns: list[str], cfg: RetrieveConfig, as_of: datetime | None,
    scope: Narrowing | None = None,
) -> list[tuple[str, float]]:
    """Facts about entities of the aggregated types (``person:%``), most reinforced and
    important first. ``patterns`` come from the planner (never from user text). The score is
    the entity's specificity: "who are my friends?" is about the other people, not about the
    user (or a speaker), whose facts are in every other row — unweighted, those flooded the
    ranking (ADR 0006)."""
    if not patterns:
        return []
    rows = conn.execute(
        f"""
        SELECT f.fact_id, f.entity_key FROM mem_facts f
         WHERE f.agent_id = %(a)s AND f.entity_key LIKE ANY(%(p)s::text[]) AND {fact_visibility(as_of, scope=scope)}
           AND f.confidence >= %(minc)s
         ORDER BY f.reinforcement_count DESC, f.importance DESC, f.valid_from DESC, f.fact_id
         LIMIT %(n)s
        """,
        {"a": agent_id, "p": patterns, "t": as_of, "minc": cfg.filters.min_confidence, "n": cfg.candidates.candidate_pool,
         **narrowing_params(scope)},
    ).fetchall()
    specific = entity_specificity(conn, agent_id, sorted({r[1] for r in rows}))
    return [(r[0], specific.get(r[1], 1.0)) for r in rows]
