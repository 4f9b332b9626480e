"""What the sleep-time jobs may change in a ranking (ADR-0030): importance and pattern evidence.

Both act after fusion/formula and the optional rerank, on the final score of every unit, by
factors at most 1 (scores stay in [0, 1], the order only moves):
- ``importance_boost`` b: a fact × ``1 − b·(1 − importance)`` (importance = the importance
  job's ``mem_fact_usage`` score, else the fact's prior); a conversation turn counts as
  importance 0.5, the neutral value the formula gives turns too;
- ``pattern_fact_boost`` b: every unit *not* cited as evidence by an observed pattern
  (``mem_patterns``, the consolidation job) × ``1 − b`` — the pattern evidence steps up.
Both are 0 (off) by default: LoCoMo-CV (docs/benchmarks.md) decides. With both off nothing
is read and nothing moves, so the default ranking is byte-identical to before.
"""

from __future__ import annotations

from typing import Any

from engramdb.services.retrieve.rank import Candidate, EventCandidate, order_key
from engramdb.services.retrieve.stages import RetrieveCall

_CITED_SQL = """
SELECT DISTINCT f FROM mem_patterns p, unnest(p.supporting_fact_ids) f
 WHERE p.agent_id = %(a)s AND p.supporting_fact_ids && %(ids)s::text[] AND f = ANY(%(ids)s)
   AND (%(t)s::timestamptz IS NULL OR p.recorded_at <= %(t)s::timestamptz)
"""


def cited_by_patterns(conn: Any, agent_id: str, fact_ids: list[str], as_of: Any) -> set[str]:
    if not fact_ids:
        return set()
    rows = conn.execute(_CITED_SQL, {"a": agent_id, "ids": fact_ids, "t": as_of}).fetchall()
    return {r[0] for r in rows}


def reweight(pool: Any, call: RetrieveCall, ranked: list[Candidate],
             events: list[EventCandidate]) -> tuple[list[Candidate], list[EventCandidate]]:
    """The two levers applied (in place) and both lists re-sorted; untouched when both are 0."""
    imp, pat = call.cfg.scoring.importance_boost, call.cfg.scoring.pattern_fact_boost
    if imp <= 0.0 and pat <= 0.0:
        return ranked, events
    cited: set[str] = set()
    if pat > 0.0:
        with pool.connection() as conn:
            cited = cited_by_patterns(conn, call.agent_id, [c.fact_id for c in ranked], call.as_of)
        call.trace.count(pattern_evidence=len(cited))
    for c in ranked:
        factor = 1.0 - imp * (1.0 - c.row.importance)
        if pat > 0.0 and c.fact_id not in cited:
            factor *= 1.0 - pat
        c.final *= factor
        c.scores["job_factor"] = round(factor, 6)
    event_factor = (1.0 - imp * 0.5) * (1.0 - pat)
    for e in events:
        e.final *= event_factor
    ranked = sorted(ranked, key=order_key)
    events = sorted(events, key=lambda e: (-round(e.final, 9), e.message_id))
    return ranked, events
