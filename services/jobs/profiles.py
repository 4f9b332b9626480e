"""Job ``profiles`` (summary refresh): an English profile per entity → ``ProfileRefreshed``.

From the entity's active facts (the ``MAX_FACTS`` most confirmed/important, as its subject),
every ``summary_refresh_interval_days`` (7) of the memory's own clock — the latest fact
recorded, not the wall clock, so a re-run on unchanged memory emits nothing. An entity is
refreshed when it has no profile yet, or when the interval has passed since its last one
*and* its top facts changed (the same facts would give the same profile: no LLM call).

With an LLM configured (``Memory.llm``) the text is its answer to ``infra/prompts/
profile_v1.md`` (bounded by ``llm_budget.profile_max_tokens``; the raw answer is recorded in
the event, so a rebuild never asks again). Offline, a deterministic template
(``template-v1``: the facts joined). An LLM failure skips that entity (no event, retried at
the next run); if every call failed the run fails (recorded by the runner).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from engramdb.infra.llm_timeout import call_with_timeout
from engramdb.infra.prompt_files import load_prompt
from engramdb.services.extraction.llm_budget import PROFILE_MAX_CHARS, profile_max_tokens
from engramdb.services.jobs.base import Job, JobContext

log = logging.getLogger("engramdb.jobs")

TEMPLATE = "template-v1"
PROMPT = "profile/v1"
MAX_FACTS = 8

_FACTS_SQL = """
SELECT e.entity_key, e.display_name, e.entity_type, f.fact_id, f.fact_text
  FROM mem_entities e
  JOIN LATERAL (
        SELECT f.fact_id, f.fact_text FROM mem_facts f
         WHERE f.agent_id = e.agent_id AND f.entity_key = e.entity_key AND f.status = 'active'
         ORDER BY f.reinforcement_count DESC, f.importance DESC, f.valid_from DESC, f.fact_id
         LIMIT %(n)s) f ON true
 WHERE e.agent_id = %(a)s AND e.merged_into IS NULL
 ORDER BY e.entity_key
"""
_CLOCK_SQL = "SELECT max(recorded_at) FROM mem_facts WHERE agent_id = %(a)s"


def template_profile(name: str, entity_type: str, texts: list[str]) -> str:
    """The offline profile: what the facts say, in their order, within the size bound."""
    text = f"{name} ({entity_type}): " + "; ".join(t.rstrip(". ") for t in texts) + "."
    return text if len(text) <= PROFILE_MAX_CHARS else text[: PROFILE_MAX_CHARS - 1] + "…"


def _trim(answer: str) -> str:
    text = " ".join(answer.split())
    if len(text) > PROFILE_MAX_CHARS:
        cut = text[:PROFILE_MAX_CHARS]
        text = cut[: cut.rfind(". ") + 1] or cut
    return text


def llm_profile(ctx: JobContext, llm: Any, name: str, entity_type: str,
                texts: list[str], timeout: float | None = None) -> tuple[str, str]:
    """(profile, raw answer) from the LLM; raises on failure or an empty answer."""
    system, user = load_prompt(PROMPT).render(
        {"name": name, "entity_type": entity_type, "facts": "\n".join(f"- {t}" for t in texts)})
    answer = call_with_timeout(
        lambda: llm.complete([{"role": "system", "content": system},
                              {"role": "user", "content": user}],
                             temperature=0, max_tokens=profile_max_tokens()),
        ctx.llm_timeout_sec if timeout is None else timeout, name="engramdb-profile")
    text = _trim(answer or "")
    if not text:
        raise ValueError("the LLM answered an empty profile")
    return text, answer


def _due(standing: list[Any] | None, fact_ids: list[str], clock: datetime,
         interval: timedelta) -> bool:
    if standing is None:
        return True
    at, _text, ids = standing
    return clock - datetime.fromisoformat(at) >= interval and ids != sorted(fact_ids)


def run(ctx: JobContext, agent_id: str) -> int:
    ctx.memory.wait_for_projections()
    with ctx.memory.pool.connection() as conn:
        rows = conn.execute(_FACTS_SQL, {"a": agent_id, "n": MAX_FACTS}).fetchall()
        clock = conn.execute(_CLOCK_SQL, {"a": agent_id}).fetchone()[0]
    if clock is None:
        return 0
    by_entity: dict[str, tuple[str, str, list[tuple[str, str]]]] = {}
    for key, name, etype, fid, text in rows:
        by_entity.setdefault(key, (name, etype, []))[2].append((fid, text))
    jobs = ctx.jobs_aggregate(agent_id)
    standing = jobs.state_of("profiles")
    interval = timedelta(days=ctx.summary_refresh_interval_days)
    llm, timeout = ctx.llm("profiles")
    changed = failed = 0
    for key, (name, etype, facts) in by_entity.items():
        ids, texts = [f for f, _ in facts], [t for _, t in facts]
        if not _due(standing.get(key), ids, clock, interval):
            continue
        ctx.check_deadline()
        output: str | None = None
        if llm is None:
            text, method = template_profile(name, etype, texts), TEMPLATE
        else:
            try:
                text, output = llm_profile(ctx, llm, name, etype, texts, timeout)
            except Exception as exc:  # provider error, timeout, empty: retried next run
                log.warning("profile of %s (%s) not refreshed: %s", key, agent_id, exc)
                failed += 1
                continue
            method = f"llm:{PROMPT}"
        changed += jobs.refresh_profile(key, text, method, ids, clock, llm_output=output,
                                        model=None if llm is None else llm.name)
    if changed:
        ctx.save(jobs)
    if failed and not changed:
        raise RuntimeError(f"{failed} profile(s) not refreshed: the LLM failed each time")
    return changed


JOB = Job("profiles", run, "entity profiles from their facts (LLM or template) -> ProfileRefreshed")
