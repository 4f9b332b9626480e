"""``mem_patterns``: meta-observations about an agent ("prefers working late"), each
supported by facts, and the query retrieval reads them with (``matching_patterns``).

The table belongs to the ``memory`` read model (ADR-0019): patterns come from job events
(``AgentJobs.PatternObserved``/``PatternRetired``) that name facts, and projecting them in
the same model as the facts keeps one position for both and needs no third projector. This
module keeps the table's declaration and its query, as before.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engramdb.projections.tables import Table

PATTERNS = Table(
    "mem_patterns",
    columns=(
        ("agent_id", "text NOT NULL"),
        ("pattern_id", "text NOT NULL"),
        ("pattern_text", "text NOT NULL"),
        ("supporting_fact_ids", "text[] NOT NULL DEFAULT '{}'"),
        ("confidence", "real NOT NULL DEFAULT 0.5"),
        ("recorded_at", "timestamptz NOT NULL"),
        # ADR-0019: what kind of pattern, who found it, the turns it rests on
        ("kind", "text NOT NULL DEFAULT ''"),
        ("method", "text NOT NULL DEFAULT ''"),
        ("message_ids", "text[] NOT NULL DEFAULT '{}'"),
    ),
    primary_key=("agent_id", "pattern_id"),
    added=("kind", "method", "message_ids"),
)


def matching_patterns(
    conn: Any,
    agent_id: str,
    fact_ids: list[str],
    like_patterns: list[str],
    limit: int,
    as_of: datetime | None,
) -> list[tuple[str, str, float, list[str], int]]:
    """Patterns supported by ``fact_ids`` or whose text matches a (escaped) LIKE pattern,
    most supporting facts first: (pattern_id, text, confidence, supporting_fact_ids, overlap).
    Only patterns recorded by ``as_of`` (when given) count."""
    rows = conn.execute(
        """
        SELECT p.pattern_id, p.pattern_text, p.confidence, p.supporting_fact_ids,
               cardinality(ARRAY(SELECT unnest(p.supporting_fact_ids) INTERSECT SELECT unnest(%(ids)s::text[]))) AS overlap
          FROM mem_patterns p
         WHERE p.agent_id = %(a)s
           AND (%(t)s::timestamptz IS NULL OR p.recorded_at <= %(t)s::timestamptz)
           AND (p.supporting_fact_ids && %(ids)s::text[] OR p.pattern_text ILIKE ANY(%(p)s::text[]))
         ORDER BY overlap DESC, p.confidence DESC, p.pattern_id
         LIMIT %(n)s
        """,
        {"a": agent_id, "ids": fact_ids, "p": like_patterns, "t": as_of, "n": limit},
    ).fetchall()
    return [(r[0], r[1], float(r[2]), list(r[3] or []), int(r[4])) for r in rows]


def patterns_near(
    conn: Any,
    agent_id: str,
    fact_ids: list[str],
    like_patterns: list[str],
    as_of: datetime | None,
) -> list[tuple[str, str, float, list[str], bool]]:
    """Every pattern ``matching_patterns`` could return for any subset of ``fact_ids``:
    (pattern_id, text, confidence, supporting_fact_ids, whether its text matches a LIKE
    pattern), unordered — ``choose_patterns`` then picks as ``matching_patterns`` would for
    the subset. Why: the retrieve call asks this for its candidates before it knows which of
    them it returns, beside its last stages, instead of one more round trip after them."""
    rows = conn.execute(
        """
        SELECT p.pattern_id, p.pattern_text, p.confidence, p.supporting_fact_ids,
               p.pattern_text ILIKE ANY(%(p)s::text[]) AS matches
          FROM mem_patterns p
         WHERE p.agent_id = %(a)s
           AND (%(t)s::timestamptz IS NULL OR p.recorded_at <= %(t)s::timestamptz)
           AND (p.supporting_fact_ids && %(ids)s::text[] OR p.pattern_text ILIKE ANY(%(p)s::text[]))
        """,
        {"a": agent_id, "ids": fact_ids, "p": like_patterns, "t": as_of},
    ).fetchall()
    return [(r[0], r[1], float(r[2]), list(r[3] or []), bool(r[4])) for r in rows]


def choose_patterns(
    near: list[tuple[str, str, float, list[str], bool]], fact_ids: list[str], limit: int
) -> list[tuple[str, str, float, list[str], int]]:
    """``matching_patterns``' answer for ``fact_ids`` (a subset of those ``near`` was asked
    for), from ``near``: supported by them or matching, most supporting facts first, then
    confidence, then id (codepoint order: the same as the database's for the ids engramdb
    makes)."""
    wanted = set(fact_ids)
    picked = []
    for pid, text, conf, support, matches in near:
        overlap = len(set(support) & wanted)
        if overlap or matches:
            picked.append((pid, text, conf, support, overlap))
    picked.sort(key=lambda r: (-r[4], -r[2], r[0]))
    return picked[: max(0, limit)]
