"""Consolidation by an LLM (ADR-0030): patterns the deterministic detectors cannot see.

Only with an LLM configured (``Memory.llm``) and at least ``CONSOLIDATION_MIN_EVENTS`` (3)
active facts from the lookback window (7 days of the memory's clock). The LLM gets the
``MAX_FACTS`` most recent of them, numbered, through ``infra/prompts/consolidation_v1.md``
(bounded by ``llm_budget.consolidation_max_tokens``, JSON schema in ``response_format``) and
names patterns citing fact numbers. The answer is validated (``Review``: JSON of the schema,
at most 5 patterns, each a non-empty sentence citing ≥ 2 numbers that exist); the numbers
become fact ids here, so the LLM can neither invent nor misspell an id.

Recorded, so a replay asks nothing: each pattern is a ``PatternObserved`` with ``method =
llm:consolidation/v1`` and the raw answer in ``llm_output``; the review itself is a
``ConsolidationReviewed`` event carrying the input's digest — an unchanged input is never
sent again (its patterns stand), and an answer naming no pattern is recorded too.

Fail-safe: a provider error, a timeout, a cut (``ProviderTruncated``) or invalid answer
records nothing from the LLM; the deterministic patterns are saved anyway, the LLM's earlier
patterns stand, and the run is then marked failed with the reason (``mem_job_runs``), to be
asked again at the next run.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engramdb.domain.jobs import AgentJobs
from engramdb.infra.llm_timeout import call_with_timeout
from engramdb.infra.prompt_files import load_prompt
from engramdb.services.extraction.llm_budget import (
    CONSOLIDATION_MAX_PATTERNS,
    consolidation_max_tokens,
)
from engramdb.services.jobs.base import JobContext

log = logging.getLogger("engramdb.jobs")

PROMPT = "consolidation/v1"
METHOD = f"llm:{PROMPT}"
MIN_FACTS = 3
MAX_FACTS = 40
LOOKBACK_DAYS = 7.0
MAX_TEXT = 200

Found = dict[str, tuple[str, str, list[str], list[str], float]]


class LLMPattern(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=MAX_TEXT)
    kind: str = Field(default="other", max_length=20)
    evidence: list[int] = Field(min_length=2, max_length=20)
    confidence: float = Field(default=0.6, ge=0.0, le=1.0)


class Review(BaseModel):
    model_config = ConfigDict(extra="forbid")

    patterns: list[LLMPattern] = Field(max_length=CONSOLIDATION_MAX_PATTERNS)


def response_format() -> dict[str, Any]:
    schema = {
        "type": "object", "additionalProperties": False, "required": ["patterns"],
        "properties": {"patterns": {"type": "array", "maxItems": CONSOLIDATION_MAX_PATTERNS, "items": {
            "type": "object", "additionalProperties": False,
            "required": ["text", "kind", "evidence", "confidence"],
            "properties": {"text": {"type": "string"}, "kind": {"type": "string"},
                           "evidence": {"type": "array", "items": {"type": "integer"}},
                           "confidence": {"type": "number"}}}}},
    }
    return {"type": "json_schema",
            "json_schema": {"name": "consolidation", "schema": schema, "strict": True}}


class ReviewFailed(RuntimeError):
    """The LLM gave no usable answer (its patterns stand; asked again next run)."""


def recent_facts(rows: list[Any]) -> list[Any]:
    """The active facts the LLM sees: the lookback window's, newest first, at most MAX_FACTS."""
    if not rows:
        return []
    since = max(max(r[7], r[6] or r[7]) for r in rows) - timedelta(days=LOOKBACK_DAYS)
    recent = [r for r in rows if r[7] >= since]
    return sorted(recent, key=lambda r: (r[7], r[0]), reverse=True)[:MAX_FACTS]


def parse(answer: str, fact_ids: list[str]) -> Review:
    """The validated review; raises ``ReviewFailed`` naming what was wrong."""
    text = answer.strip()
    if text.startswith("```"):  # a model that fences its JSON anyway
        text = text.strip("`").removeprefix("json").strip()
    try:
        review = Review.model_validate(json.loads(text))
    except (json.JSONDecodeError, ValidationError) as exc:
        raise ReviewFailed(f"invalid consolidation answer: {str(exc)[:200]}") from None
    for p in review.patterns:
        if not all(1 <= n <= len(fact_ids) for n in p.evidence):
            raise ReviewFailed(f"consolidation answer cites facts outside 1..{len(fact_ids)}")
    return review


def _pid(fact_ids: list[str]) -> str:
    return "p_" + hashlib.sha256(("llm\x00" + "\x00".join(sorted(fact_ids))).encode()).hexdigest()[:16]


def review(ctx: JobContext, jobs: AgentJobs, rows: list[Any]) -> tuple[Found, str | None]:
    """(patterns the LLM stands behind, the new raw answer or None when not asked). Raises
    ``ReviewFailed`` after a failed call (the caller saves the rest first)."""
    llm, timeout = ctx.llm("consolidation")
    facts = recent_facts(rows)
    if llm is None or len(facts) < MIN_FACTS:
        return {}, None
    ids = [r[0] for r in facts]
    lines = "\n".join(f"[{n}] ({r[7].date().isoformat()}) {r[2]}: {' '.join(r[4].split())}"
                      for n, r in enumerate(facts, start=1))
    system, user = load_prompt(PROMPT).render(
        {"facts": lines, "max_patterns": str(CONSOLIDATION_MAX_PATTERNS)})
    digest = hashlib.sha256(f"{PROMPT}\x00{system}\x00{user}".encode()).hexdigest()[:32]
    standing = jobs.state_of("consolidation_llm").get("review")
    if standing is not None and standing[0] == digest:  # reviewed: its patterns stand
        return {pid: ("llm", *jobs.patterns[pid][:2], [], jobs.patterns[pid][2])
                for pid in standing[1] if pid in jobs.patterns}, None
    ctx.check_deadline()
    try:
        answer = call_with_timeout(
            lambda: llm.complete([{"role": "system", "content": system},
                                  {"role": "user", "content": user}],
                                 temperature=0, response_format=response_format(),
                                 max_tokens=consolidation_max_tokens()),
            timeout, name="engramdb-consolidation")
    except Exception as exc:  # provider error, timeout, ProviderTruncated: nothing recorded
        raise ReviewFailed(f"consolidation LLM call failed: {type(exc).__name__}: {exc}") from None
    parsed = parse(answer or "", ids)
    found: Found = {}
    for p in parsed.patterns:
        cited = sorted({ids[n - 1] for n in p.evidence})
        messages = sorted({m for r in facts if r[0] in cited for m in (r[9] or [])[:1]})
        found[_pid(cited)] = (p.kind.strip().lower() or "other", " ".join(p.text.split()),
                              cited, messages, round(p.confidence, 3))
    jobs.review_consolidation(METHOD, digest, answer, sorted(found), model=llm.name)
    return found, answer
