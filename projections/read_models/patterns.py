"""Read model ``patterns``: meta-observations about an agent ("prefers working late"), each
supported by facts. Retrieval already reads them (``matching_patterns``).

Empty until the background jobs that derive patterns exist: no event is handled yet, so the
registry runs no projector for it (``ReadModel.projected``) — schema setup creates the table and
rebuild recreates it, empty. When a job starts emitting pattern events, handlers go on
``PatternsView``/``PatternsFold`` and this becomes an ordinary projected read model.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engramdb.projections.read_model import BulkFold, ReadModel, ReadModelView
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
    ),
    primary_key=("agent_id", "pattern_id"),
)


class PatternsView(ReadModelView):
    projection_name = "patterns"
    tables = (PATTERNS,)


class PatternsFold(BulkFold):
    def rows(self, table: str) -> list[tuple[Any, ...]]:
        if table != PATTERNS.name:
            raise KeyError(table)
        return []


READ_MODEL = ReadModel(PatternsView, PatternsFold)


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
