"""Job ``importance``: a score per active fact and entity → ``ImportanceAssessed``.

Rule ``importance-v1`` (docs/spec.md §4; weights in ADR-0019). Each input is a signal in [0, 1]:
- usage: retrieval frequency ``1 - e^(-n/5)`` and recency of use (half-life 30 days);
- correction: the fact is the user's correction of a stored fact (``CorrectionNoted``);
- reinforcement: confirmations ``1 - e^(-k/3)``;
- patterns: patterns it supports (0 until a job writes ``mem_patterns``);
- connectivity: relationships of its subject + entities it links ``1 - e^(-d/8)``.
``importance = prior + (1 - prior) * noisy-OR(w_i * s_i)``, ``prior`` the importance the
fact was decided with (the spec's starting 0.5): an unused, unconnected fact keeps it, and
each input can only raise it. Scores go to ``mem_fact_usage`` (the prior stays in
``mem_facts``), so a re-assessment starts from the prior again, never from its own output. An entity scores
``0.5 + 0.5 * noisy-OR(0.5 * connectivity, 0.5 * best fact's excess)``.

Recency is measured against the memory's own clock — the latest fact recorded or retrieval
seen — not the wall clock, so a run on unchanged memory computes the same scores and emits
nothing (idempotent), and a rebuild never needs the job again. Scores are rounded to 3
decimals; only those that differ from the current importance are sent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engramdb.services.jobs.base import Job, JobContext

METHOD = "importance-v1"
WEIGHTS = {"usage": 0.6, "correction": 0.6, "reinforcement": 0.3, "patterns": 0.3,
           "connectivity": 0.3}
USE_HALF_LIFE_DAYS = 30.0


@dataclass(frozen=True)
class FactInputs:
    fact_id: str
    entity_key: str
    times_retrieved: int
    last_retrieved_at: datetime | None
    is_correction: bool
    reinforcement_count: int
    patterns: int
    degree: int


def _noisy_or(values: list[float]) -> float:
    miss = 1.0
    for value in values:
        miss *= 1.0 - max(0.0, min(1.0, value))
    return 1.0 - miss


def fact_signals(f: FactInputs, clock: datetime | None) -> dict[str, float]:
    frequency = 1.0 - math.exp(-f.times_retrieved / 5.0)
    recency = 0.0
    if f.last_retrieved_at is not None and clock is not None:
        days = max(0.0, (clock - f.last_retrieved_at).total_seconds() / 86400.0)
        recency = 0.5 ** (days / USE_HALF_LIFE_DAYS)
    return {
        "usage": 0.6 * frequency + 0.4 * recency if f.times_retrieved else 0.0,
        "correction": 1.0 if f.is_correction else 0.0,
        "reinforcement": 1.0 - math.exp(-f.reinforcement_count / 3.0),
        "patterns": 1.0 - math.exp(-f.patterns / 2.0),
        "connectivity": 1.0 - math.exp(-f.degree / 8.0),
    }


def fact_importance(f: FactInputs, clock: datetime | None, prior: float = 0.5) -> float:
    """``prior``: the importance the fact was decided with (``mem_facts.importance``)."""
    signals = fact_signals(f, clock)
    boost = _noisy_or([WEIGHTS[k] * v for k, v in signals.items()])
    return round(prior + (1.0 - prior) * boost, 3)


def entity_importance(degree: int, best_fact: float) -> float:
    connectivity = 1.0 - math.exp(-degree / 8.0)
    return round(0.5 + 0.5 * _noisy_or([0.5 * connectivity, (best_fact - 0.5)]), 3)


_FACTS_SQL = """
SELECT f.fact_id, f.entity_key, coalesce(u.times_retrieved, 0), u.last_retrieved_at,
       f.is_correction, f.reinforcement_count, f.importance, u.importance, f.recorded_at,
       (SELECT count(*) FROM mem_fact_entities l
         WHERE l.agent_id = f.agent_id AND l.fact_id = f.fact_id AND NOT l.is_primary) AS links
  FROM mem_facts f
  LEFT JOIN mem_fact_usage u ON u.agent_id = f.agent_id AND u.fact_id = f.fact_id
 WHERE f.agent_id = %(a)s AND f.status = 'active'
"""
_DEGREE_SQL = """
SELECT k, count(DISTINCT other) FROM (
  SELECT source_key AS k, target_key AS other FROM mem_relationships WHERE agent_id = %(a)s
  UNION ALL
  SELECT target_key, source_key FROM mem_relationships WHERE agent_id = %(a)s) r GROUP BY k
"""
_PATTERNS_SQL = """
SELECT fid, count(*) FROM mem_patterns, unnest(supporting_fact_ids) AS fid
 WHERE agent_id = %(a)s GROUP BY fid
"""
_ENTITIES_SQL = (
    "SELECT entity_key, importance FROM mem_entities WHERE agent_id = %(a)s AND merged_into IS NULL"
)


def _read(ctx: JobContext, agent_id: str) -> tuple[list[Any], dict[str, int], dict[str, int],
                                                   dict[str, float]]:
    p = {"a": agent_id}
    with ctx.memory.pool.connection() as conn:
        facts = conn.execute(_FACTS_SQL, p).fetchall()
        degree = {k: int(n) for k, n in conn.execute(_DEGREE_SQL, p).fetchall()}
        patterns = {k: int(n) for k, n in conn.execute(_PATTERNS_SQL, p).fetchall()}
        entities = {k: float(v) for k, v in conn.execute(_ENTITIES_SQL, p).fetchall()}
    return facts, degree, patterns, entities


def run(ctx: JobContext, agent_id: str) -> int:
    ctx.memory.wait_for_projections()  # score what the log holds now, feedback included
    rows, degree, patterns, current_entities = _read(ctx, agent_id)
    times = [t for r in rows for t in (r[8], r[3]) if t is not None]
    clock = max(times) if times else None
    scores: dict[str, float] = {}
    best: dict[str, float] = {}
    changed: dict[str, float] = {}
    for i, (fid, entity, n, last, corr, reinf, prior, assessed, _rec, links) in enumerate(rows):
        if i % 1000 == 0:
            ctx.check_deadline()
        inputs = FactInputs(fid, entity, int(n), last, bool(corr), int(reinf),
                            patterns.get(fid, 0), degree.get(entity, 0) + int(links))
        scores[fid] = value = fact_importance(inputs, clock, float(prior))
        best[entity] = max(best.get(entity, 0.5), value)
        if round(float(prior if assessed is None else assessed), 3) != value:
            changed[fid] = value
    entities = {
        key: value for key, current in current_entities.items()
        if round(current, 3) != (value := entity_importance(degree.get(key, 0), best.get(key, 0.5)))
    }
    if not changed and not entities or clock is None:
        return 0
    jobs = ctx.jobs_aggregate(agent_id)
    if not jobs.assess_importance(METHOD, changed, entities, clock):
        return 0
    ctx.save(jobs)
    return 1


JOB = Job("importance", run, "importance per fact and entity -> ImportanceAssessed")
