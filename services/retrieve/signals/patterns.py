"""Patterns (meta-observations) supported by the returned facts or matching the keywords."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engramdb.projections.read_models.patterns import (
    choose_patterns,
    matching_patterns,
    patterns_near,
)
from engramdb.services.retrieve.signals.shared import escape_like


def patterns_for(
    conn: Any, agent_id: str, fact_ids: list[str], words: list[str], limit: int, as_of: datetime | None
) -> list[tuple[str, str, float, list[str], int]]:
    """Meta-observations supported by the returned facts or matching the keywords:
    (pattern_id, text, confidence, supporting_fact_ids, overlap)."""
    if limit <= 0 or (not fact_ids and not words):
        return []
    patterns = [f"%{escape_like(w)}%" for w in words] or ["\x01never"]
    return matching_patterns(conn, agent_id, fact_ids, patterns, limit, as_of)


#: what ``prefetch_patterns`` found: the fact ids it was asked for, and the patterns near them
PatternsNear = tuple[frozenset[str], list[tuple[str, str, float, list[str], bool]]]


def _like(words: list[str]) -> list[str]:
    return [f"%{escape_like(w)}%" for w in words] or ["\x01never"]


def prefetch_patterns(
    conn: Any, agent_id: str, candidate_ids: list[str], words: list[str], as_of: datetime | None
) -> PatternsNear:
    """The patterns ``patterns_for`` could return for any subset of the call's candidate facts
    (ADR-0041: asked beside the last stages, not after them)."""
    return frozenset(candidate_ids), patterns_near(conn, agent_id, candidate_ids, _like(words), as_of)


def patterns_from(
    near: PatternsNear, fact_ids: list[str], words: list[str], limit: int
) -> list[tuple[str, str, float, list[str], int]] | None:
    """``patterns_for``'s answer from ``prefetch_patterns``' rows; None when a fact id was not
    among the candidates it was asked for (the caller then asks the database)."""
    asked, rows = near
    if not set(fact_ids) <= asked:
        return None
    if limit <= 0 or (not fact_ids and not words):
        return []
    return choose_patterns(rows, fact_ids, limit)
