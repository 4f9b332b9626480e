"""Timestamps that psycopg cannot represent, read as the edge of the accepted window.

Why: before the edge checked ``occurred_at`` (``domain.time_range``, ADR-0012), a message at
``9999-12-31T23:59:59-14:00`` could be stored; PostgreSQL keeps it as year 10000 UTC, which
Python's ``datetime`` cannot hold, so psycopg raised ``DataError`` on every read of that
agent's read models — every retrieve of the agent was a 500. The read pool registers these
loaders: such a value reads as the window's edge (``LATEST`` / ``EARLIEST``) instead, so an
agent poisoned by an old release stays readable. In-range values load exactly as before.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.datetime import TimestamptzBinaryLoader, TimestamptzLoader

from engramdb.domain.time_range import EARLIEST, LATEST


def _edge(data: Any) -> datetime:
    text = bytes(data).decode("ascii", "replace")
    return EARLIEST if ("BC" in text or text.startswith("0000")) else LATEST


class ClampingTimestamptzLoader(TimestamptzLoader):
    """Text format. Fast path ``datetime.fromisoformat`` (PostgreSQL's ISO output, ~0.3 µs
    against ~4 µs for psycopg's pure-Python loader, which subclassing forces); anything it
    does not take (BC dates, year 10000, another DateStyle) goes to psycopg's own parser."""

    def load(self, data: Any) -> datetime:
        try:
            return datetime.fromisoformat(bytes(data).decode("ascii"))
        except ValueError:
            pass
        try:
            return super().load(data)
        except psycopg.DataError:
            return _edge(data)


class ClampingTimestamptzBinaryLoader(TimestamptzBinaryLoader):
    def load(self, data: Any) -> datetime:
        try:
            return super().load(data)
        except psycopg.DataError:  # microseconds since 2000-01-01: the sign says which edge
            return EARLIEST if int.from_bytes(bytes(data), "big", signed=True) < 0 else LATEST


def register_clamping_loaders(conn: psycopg.Connection[Any]) -> None:
    """Make ``conn`` read out-of-range ``timestamptz`` values as the window's edges."""
    conn.adapters.register_loader("timestamptz", ClampingTimestamptzLoader)
    conn.adapters.register_loader("timestamptz", ClampingTimestamptzBinaryLoader)
