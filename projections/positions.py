"""Projection positions as data: read from the tracking tables, waited on from any process.

Why separate from the runners: a retrieve replica, a standby projector (ADR-0020) and
``engramdb status`` read positions without running a projector; this module needs only a
connection."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from engramdb.projections.read_models import PROJECTION_NAMES

APPLICATION_NAME = "engramdb"


def _poll(check: Any, position: int, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        lagging = check()
        if not lagging:
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: {lagging} not at notification {position} after {timeout}s")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _conninfo(env: dict[str, str]) -> str:
    """libpq conninfo of eventsourcing's ``POSTGRES_*`` settings (as the runners use them)."""
    merged = {**os.environ, **env}
    return make_conninfo(
        dbname=merged.get("POSTGRES_DBNAME", "postgres"),
        host=merged.get("POSTGRES_HOST", "localhost"),
        port=merged.get("POSTGRES_PORT", "5432"),
        user=merged.get("POSTGRES_USER", "postgres"),
        password=merged.get("POSTGRES_PASSWORD", ""),
    )


def tracking_positions(
    target: Any,
    schema: str = "public",
    projections: Iterable[str] = PROJECTION_NAMES,
    application_name: str = APPLICATION_NAME,
) -> dict[str, int | None]:
    """Current position of each projection, read from its tracking table.

    ``target`` is a libpq DSN/URL, an open psycopg connection, or an eventsourcing
    ``PostgresDatastore`` (then its schema is used).
    """
    if hasattr(target, "get_connection"):  # PostgresDatastore
        schema = target.schema
        with target.get_connection() as conn:
            return tracking_positions(conn, schema, projections, application_name)
    if isinstance(target, str):
        with psycopg.connect(target, autocommit=True) as conn:
            return tracking_positions(conn, schema, projections, application_name)
    out: dict[str, int | None] = {}
    for name in projections:
        table = sql.Identifier(schema, f"{name}_tracking")
        try:
            row = target.execute(
                sql.SQL("SELECT max(notification_id) FROM {} WHERE application_name = %s").format(
                    table
                ),
                (application_name,),
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            out[name] = None
            continue
        value = row["max"] if isinstance(row, dict) else row[0]
        out[name] = value
    return out


def wait_for_position(
    target: Any,
    position: int | None,
    timeout: float = 30.0,
    *,
    schema: str = "public",
    projections: Iterable[str] = PROJECTION_NAMES,
    application_name: str = APPLICATION_NAME,
) -> None:
    """Block until every projection's tracking table reached ``position`` (any process)."""
    if position is None:
        return
    names = tuple(projections)
    if isinstance(target, str):
        with psycopg.connect(target, autocommit=True) as conn:
            wait_for_position(
                conn, position, timeout, schema=schema, projections=names,
                application_name=application_name,
            )
        return

    def lagging() -> list[str]:
        now = tracking_positions(target, schema, names, application_name)
        return [n for n, p in now.items() if p is None or p < position]

    _poll(lagging, position, timeout, "projections")
