"""Job ``vitality``: how alive each active fact is → ``FactVitalityAssessed``.

Rule ``vitality-v1`` (``domain.vitality``): recency of the fact, recency of its last
confirmation or use (``last_confirmed_at``, ``mem_fact_usage.last_retrieved_at``) and its
importance (the importance job's assessment when there is one). Facts under 0.3 are flagged
as *candidates for consolidation*; nothing is deleted. Measured on the memory's own clock
(the latest time a fact held from, was confirmed or was used — ADR-0030; not when it was
recorded), and only facts whose score bucket (0.05) or flag
changed are sent, so unchanged memory emits nothing. Run after ``importance``.
"""

from __future__ import annotations

from engramdb.domain.vitality import METHOD, is_low, vitality
from engramdb.services.jobs.base import Job, JobContext

_FACTS_SQL = """
SELECT f.fact_id, f.valid_from, f.last_confirmed_at, u.last_retrieved_at,
       coalesce(u.importance, f.importance), f.recorded_at
  FROM mem_facts f
  LEFT JOIN mem_fact_usage u ON u.agent_id = f.agent_id AND u.fact_id = f.fact_id
 WHERE f.agent_id = %(a)s AND f.status = 'active'
"""


def run(ctx: JobContext, agent_id: str) -> int:
    ctx.memory.wait_for_projections()
    with ctx.memory.pool.connection() as conn:
        rows = conn.execute(_FACTS_SQL, {"a": agent_id}).fetchall()
    # the memory's clock is when things happened, not when they were stored (ADR-0030): an
    # old conversation ingested today must not make every fact look years stale
    times = [t for r in rows for t in (r[1], r[2], r[3]) if t is not None]
    if not times:
        return 0
    clock = max(times)
    ctx.check_deadline()
    scores = {fid: vitality(clock, valid_from, confirmed, used, float(importance))
              for fid, valid_from, confirmed, used, importance, _ in rows}
    low = {fid for fid, score in scores.items() if is_low(score)}
    jobs = ctx.jobs_aggregate(agent_id)
    if not jobs.assess_vitality(METHOD, scores, low, clock):
        return 0
    ctx.save(jobs)
    return 1


JOB = Job("vitality", run, "vitality per fact; low ones flagged for consolidation "
          "-> FactVitalityAssessed")
