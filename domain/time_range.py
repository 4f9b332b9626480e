"""The range of instants engramdb accepts: ``occurred_at`` of a message and ``as_of`` of a read.

Why a range at all: Python's ``datetime`` stops at years 1 and 9999 *in local time*, and
PostgreSQL's ``timestamptz`` reaches further, so ``9999-12-31T23:59:59-14:00`` is a valid
Python value that PostgreSQL stores as year 10000 UTC — and that psycopg can then never read
back: every later retrieve of the agent failed (issue 10). Year 1 with ``+14:00`` underflows
the same way. Any instant outside a sane window is a caller's mistake, so every surface
rejects it with this one rule (ADR-0012) instead of storing a value that breaks reads.

Why 1900–2200: conversation turns are recorded by software, so a turn before 1900 or after
2199 is a wrong clock or a placeholder ("0001-01-01", "9999-12-31"), never a real turn; the
window stays far from both ends of every datetime type involved, so arithmetic on it (recency
decay, UTC conversion at ±14:00) cannot overflow.
"""

from __future__ import annotations

from datetime import UTC, datetime

EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)
"""The earliest accepted instant (inclusive)."""

LATEST = datetime(2200, 1, 1, tzinfo=UTC)
"""The first instant no longer accepted (exclusive)."""

TIME_RULE = "an ISO 8601 instant from 1900-01-01T00:00:00Z up to (not including) 2200-01-01T00:00:00Z"
"""The rule in words, for error messages and API descriptions."""


def check_instant(value: datetime, what: str) -> datetime:
    """``value`` made timezone-aware (a naive value is UTC) if it lies in the window; else a
    ``ValueError`` naming ``what`` and the rule."""
    if value.tzinfo is None or value.utcoffset() is None:
        value = value.replace(tzinfo=UTC)
    try:
        in_range = EARLIEST <= value < LATEST
    except OverflowError:  # comparing converts to UTC, which can leave datetime's range
        in_range = False
    if not in_range:
        raise ValueError(f"{what} {value.isoformat()} is out of range: use {TIME_RULE}")
    return value


