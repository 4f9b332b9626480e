"""Vitality of a fact (ADR-0022): how alive it is in the agent's memory, in [0, 1].

Pure, so the job, the aggregate and the tests share one rule (``vitality-v1``):
``vitality = 0.4·recency + 0.3·confirmation recency + 0.3·importance``, recency terms
``0.5^(age/half-life)`` on the memory's own clock (half-lives 90 and 60 days). A fact under
``LOW_VITALITY`` (0.3) is a *candidate for consolidation*: flagged, never deleted.
Scores are compared in buckets of 0.05 so a fact that only ages a little emits nothing.
"""

from __future__ import annotations

from datetime import datetime

METHOD = "vitality-v1"
LOW_VITALITY = 0.3
BUCKET = 0.05
RECENCY_HALF_LIFE_DAYS = 90.0
CONFIRMATION_HALF_LIFE_DAYS = 60.0
WEIGHTS = {"recency": 0.4, "confirmation": 0.3, "importance": 0.3}


def bucket_of(score: float) -> int:
    """In integer milli-units (0.15 / 0.05 is 2.999... in floating point)."""
    return round(float(score) * 1000) // round(BUCKET * 1000)


def _recency(clock: datetime, when: datetime | None, half_life: float) -> float:
    if when is None:
        return 0.0
    days = max(0.0, (clock - when).total_seconds() / 86400.0)
    return float(0.5 ** (days / half_life))


def vitality(clock: datetime, valid_from: datetime, last_confirmed_at: datetime | None,
             last_retrieved_at: datetime | None, importance: float) -> float:
    """``last_retrieved_at`` counts as a confirmation too (the fact was used)."""
    seen = max((t for t in (last_confirmed_at, last_retrieved_at) if t is not None),
               default=None)
    value = (WEIGHTS["recency"] * _recency(clock, valid_from, RECENCY_HALF_LIFE_DAYS)
             + WEIGHTS["confirmation"] * _recency(clock, seen, CONFIRMATION_HALF_LIFE_DAYS)
             + WEIGHTS["importance"] * max(0.0, min(1.0, importance)))
    return round(value, 3)


def is_low(score: float) -> bool:
    return score < LOW_VITALITY
