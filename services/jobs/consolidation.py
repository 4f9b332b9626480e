"""Job ``consolidation``: recurring patterns and contradictions → ``PatternObserved``.

Deterministic detectors (``method`` says ``deterministic:<detector>`` so a reader knows what
found a pattern), over the ``memory`` read model, on the memory's own clock (the latest time a
fact held from or was confirmed; ADR-0030), so unchanged memory finds the same patterns and
emits nothing:
- ``contradiction``: two or more active facts give one subject's single-valued attribute
  (same ``attribute_key``) different values;
- ``repeated``: a fact stated at least ``CONSOLIDATION_MIN_EVENTS`` (3) times (its
  confirmations), the last within ``LOOKBACK_DAYS`` (7);
- ``recurring topic``: a subject with at least 3 facts from the last 7 days.
- ``periodic`` (``periodic``, ADR-0030): one activity recurring at regular intervals.
With an LLM configured, ``llm_review`` adds what the LLM finds (``method = llm:<prompt>``,
its answer in the event; ADR-0030).
A pattern found before and not now is retired (``PatternRetired``). Texts are English.
"""

from __future__ import annotations

import hashlib
import logging
from collections import defaultdict
from datetime import timedelta
from typing import Any

from engramdb.services.jobs import llm_review, periodic
from engramdb.services.jobs.base import Job, JobContext

log = logging.getLogger("engramdb.jobs")

CONSOLIDATION_MIN_EVENTS = 3
LOOKBACK_DAYS = 7.0
MAX_EVIDENCE = 10

_FACTS_SQL = """
SELECT f.fact_id, f.entity_key, coalesce(e.display_name, f.entity_key), f.attribute_key,
       f.fact_text, f.reinforcement_count, f.last_confirmed_at, f.valid_from, f.recorded_at,
       f.source_message_ids
  FROM mem_facts f
  LEFT JOIN mem_entities e ON e.agent_id = f.agent_id AND e.entity_key = f.entity_key
 WHERE f.agent_id = %(a)s AND f.status = 'active'
 ORDER BY f.fact_id
"""

Found = dict[str, tuple[str, str, list[str], list[str], float]]  # id -> kind, text, facts, msgs, conf


def _pid(kind: str, key: str) -> str:
    return "p_" + hashlib.sha256(f"{kind}\x00{key}".encode()).hexdigest()[:16]


def memory_clock(rows: list[Any]) -> Any:
    """When the latest thing happened (a fact's ``valid_from`` or confirmation), not when it
    was stored (ADR-0030): an old conversation ingested today is judged by its own dates."""
    return max(max(r[7], r[6] or r[7]) for r in rows)


def detect(rows: list[Any]) -> Found:
    """The patterns standing in these active-fact rows (pure: tests call it directly)."""
    found: Found = {}
    if not rows:
        return found
    clock = memory_clock(rows)
    since = clock - timedelta(days=LOOKBACK_DAYS)
    by_attribute: dict[tuple[str, str], list[Any]] = defaultdict(list)
    by_subject: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        fid, key, name, attribute, text, reinf, confirmed, valid_from, _rec, sources = r
        if attribute:
            by_attribute[(key, attribute)].append(r)
        if valid_from >= since:
            by_subject[key].append(r)
        if reinf + 1 >= CONSOLIDATION_MIN_EVENTS and confirmed is not None and confirmed >= since:
            found[_pid("repeated", fid)] = (
                "repeated", f'{name} said this {reinf + 1} times: "{text}"', [fid],
                list(sources or []), round(min(1.0, 0.5 + 0.1 * reinf), 3))
    for (key, attribute), group in sorted(by_attribute.items()):
        values = sorted({r[4] for r in group})
        if len(values) > 1:
            found[_pid("contradiction", f"{key}\x00{attribute}")] = (
                "contradiction",
                f"Conflicting facts about {group[0][2]}'s {attribute.replace('_', ' ')}: "
                + "; ".join(f'"{v}"' for v in values),
                [r[0] for r in group], [m for r in group for m in (r[9] or [])[:1]], 0.8)
    for key, group in sorted(by_subject.items()):
        if len(group) >= CONSOLIDATION_MIN_EVENTS:
            recent = sorted(group, key=lambda r: (r[7], r[0]), reverse=True)[:MAX_EVIDENCE]
            found[_pid("recurring", key)] = (
                "recurring topic",
                f"{group[0][2]} came up often lately: {len(group)} facts in the last "
                f"{LOOKBACK_DAYS:g} days",
                [r[0] for r in recent], [], round(min(1.0, 0.4 + 0.05 * len(group)), 3))
    return found


_TIMES_SQL = """
SELECT message_id, occurred_at FROM mem_messages WHERE agent_id = %(a)s AND message_id = ANY(%(m)s)
"""


def run(ctx: JobContext, agent_id: str) -> int:
    ctx.memory.wait_for_projections()
    with ctx.memory.pool.connection() as conn:
        rows = conn.execute(_FACTS_SQL, {"a": agent_id}).fetchall()
        cited = sorted({m for r in rows for m in (r[9] or [])})
        times = dict(conn.execute(_TIMES_SQL, {"a": agent_id, "m": cited}).fetchall())
    ctx.check_deadline()
    found = detect(rows)
    found.update(periodic.detect(rows, times, _pid))  # ADR-0030
    ctx.check_deadline()
    jobs = ctx.jobs_aggregate(agent_id)
    failure: llm_review.ReviewFailed | None = None
    try:  # ADR-0030: with an LLM configured, what it finds (its answer in the events)
        by_llm, answer = llm_review.review(ctx, jobs, rows)
    except llm_review.ReviewFailed as exc:  # fail-safe: the LLM's earlier patterns stand
        failure, by_llm, answer = exc, {}, None
        standing = jobs.state_of("consolidation_llm").get("review")
        for pid in standing[1] if standing else []:
            if pid in jobs.patterns:
                text, facts, confidence = jobs.patterns[pid]
                by_llm[pid] = ("llm", text, facts, [], confidence)
    found.update(by_llm)
    changed = int(answer is not None)  # a new review is an event of its own
    for pid, (kind, text, facts, messages, confidence) in sorted(found.items()):
        method, output = ((llm_review.METHOD, answer) if pid in by_llm
                          else (f"deterministic:{kind.replace(' ', '-')}", None))
        changed += jobs.observe_pattern(pid, kind, text, facts, messages, confidence, method,
                                        llm_output=output)
    for pid in sorted(set(jobs.patterns) - set(found)):
        changed += jobs.retire_pattern(pid, "its evidence no longer holds")
    if changed:
        ctx.save(jobs)
    if failure is not None:
        log.warning("consolidation of %s: %s", agent_id, failure)
        raise failure  # recorded as failed; the deterministic patterns are saved
    return changed


JOB = Job("consolidation", run,
          "recurring, periodic and contradicting facts (deterministic; LLM when configured) "
          "-> PatternObserved")
