"""Candidate rows (``FactCandidate``) for the ids the signals found, with their cosine computed in
SQL, and the time decay the graph signal and the ranking apply to them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engramdb.services.retrieve.signals.shared import Narrowing, narrowing_params


def decay(anchor: datetime, when: datetime | None, half_life_days: float) -> float:
    """exp decay 0.5^(age/half_life); future or unknown times count as age 0."""
    if when is None:
        return 1.0
    age_days = max(0.0, (anchor - when).total_seconds() / 86400.0)
    return float(0.5 ** (age_days / half_life_days))


def floored_decay(anchor: datetime, when: datetime | None, half_life_days: float) -> float:
    """Recency as a *factor* inside the graph score: 0.5 + 0.5·decay, so an old fact about
    the entity the user names is still found (recency is ranked separately anyway)."""
    return 0.5 + 0.5 * decay(anchor, when, half_life_days)



@dataclass(frozen=True)
class FactCandidate:
    """A fact the signals found, as ranking sees it (not ``domain.fold.FactRow``, the
    read model's full row): its text, entity, the numbers the score uses, its cosine."""

    fact_id: str
    entity_key: str
    entity_name: str
    fact_text: str
    confidence: float
    importance: float
    reinforcement_count: int
    valid_from: datetime
    source_message_ids: list[str]
    cosine: float | None
    low_vitality: bool = False  # flagged by the vitality job (ADR-0022)


def hydrate_facts(conn: Any, agent_id: str, ids: list[str], qvec: str | None,
                  scope: Narrowing | None = None) -> dict[str, FactCandidate]:
    """Rows for candidate ids, with their cosine to the query computed in SQL (so facts found
    by keyword/graph/spreading get a semantic score too, without shipping vectors).
    Importance is the jobs' assessment when there is one (``mem_fact_usage``, ADR-0019)."""
    # ``scope``: the signals already narrowed; this keeps any list from adding a fact that
    # fails it (a selective narrowing's listed ids are tested here, not planned into the SQL)
    if scope is not None and scope.listed is not None:
        ids = [fid for fid in ids if fid in scope.listed]
    if not ids:
        return {}
    narrowed = "" if scope is None or scope.listed is not None else f" AND {scope.fact('f')}"
    rows = conn.execute(
        f"""
        SELECT f.fact_id, f.entity_key, coalesce(e.display_name, f.entity_key), f.fact_text,
               f.confidence, coalesce(u.importance, f.importance), f.reinforcement_count,
               f.valid_from,
               f.source_message_id, f.source_message_ids,
               CASE WHEN f.embedding IS NULL OR %(q)s::vector IS NULL THEN NULL
                    ELSE 1 - (f.embedding <=> %(q)s::vector) END,
               coalesce(u.low_vitality, false)
          FROM mem_facts f
          LEFT JOIN mem_entities e ON e.agent_id = f.agent_id AND e.entity_key = f.entity_key
          LEFT JOIN mem_fact_usage u ON u.agent_id = f.agent_id AND u.fact_id = f.fact_id
         WHERE f.agent_id = %(a)s AND f.fact_id = ANY(%(ids)s){narrowed}
        """,
        {"a": agent_id, "ids": ids, "q": qvec, **narrowing_params(scope)},
    ).fetchall()
    out: dict[str, FactCandidate] = {}
    for fid, ekey, ename, text, conf, imp, rc, vfrom, src, srcs, cos, low in rows:
        sources = list(srcs or [])
        if src and src not in sources:
            sources.insert(0, src)
        out[fid] = FactCandidate(fid, ekey, ename, text, float(conf), float(imp), int(rc), vfrom, sources,
                           None if cos is None else float(cos), bool(low))
    return out
