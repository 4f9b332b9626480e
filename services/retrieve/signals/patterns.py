"""Patterns (meta-observations) supported by the returned facts or matching the keywords."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engramdb.projections.read_models.patterns import matching_patterns
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
