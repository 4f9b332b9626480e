"""Webhook delivery counters (ADR-0049), kept beside the registry in ``engramdb_webhook_stats``.

Why in PostgreSQL and not only in the dispatcher's memory: the dispatcher runs inside ``serve``
(role ``all`` or ``ingest``), while ``engramdb status`` is another process and ``/metrics`` may be
served by a ``retrieve`` process. The dispatcher adds what it counted every couple of seconds
(increments, so two dispatchers sharing a hook's consumer add up rather than overwrite), and
records each hook's pending changes (its consumer's lag) as of then; readers see the counters as
of the last flush (``updated_at``). Counters are cumulative across restarts (Prometheus counter
semantics); deleting a hook deletes its row.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from psycopg import sql
from pydantic import BaseModel, Field

COUNTS = ("delivered", "failed_attempts", "dead_lettered")


class WebhookStats(BaseModel):
    """One registered hook and what its deliveries did so far."""

    webhook_id: str
    url: str
    target: str = Field(description="'agent <id>' or 'prefix <p>*'")
    delivered: int = Field(default=0, description="changes POSTed and answered 2xx")
    failed_attempts: int = Field(default=0, description="attempts answered non-2xx or not at all")
    dead_lettered: int = Field(default=0, description="changes given up on after max_attempts")
    pending: int | None = Field(
        default=None, description="changes of the stream this hook has not settled yet (None: "
        "no dispatcher has reported)")
    last_error: str | None = None
    updated_at: datetime | None = Field(default=None, description="the dispatcher's last report")


def _stats(schema: str) -> sql.Composable:
    return sql.Identifier(schema, "engramdb_webhook_stats")


def _hooks(schema: str) -> sql.Composable:
    return sql.Identifier(schema, "engramdb_webhooks")


def ensure_stats_table(conn: Any, schema: str) -> None:
    conn.execute(sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (webhook_id text PRIMARY KEY, delivered bigint NOT NULL "
        "DEFAULT 0, failed_attempts bigint NOT NULL DEFAULT 0, dead_lettered bigint NOT NULL "
        "DEFAULT 0, pending bigint, last_error text, updated_at timestamptz)").format(_stats(schema)))


def add_stats(conn: Any, schema: str, deltas: Mapping[str, Mapping[str, int]],
              pending: Mapping[str, int], errors: Mapping[str, str]) -> None:
    """Add ``deltas`` (per hook: ``COUNTS`` keys) and set ``pending`` / the last error, for
    hooks still registered (a hook deleted meanwhile gets no row back)."""
    ensure_stats_table(conn, schema)
    for hook_id in set(deltas) | set(pending) | set(errors):
        d = deltas.get(hook_id, {})
        conn.execute(sql.SQL(
            "INSERT INTO {s} (webhook_id, delivered, failed_attempts, dead_lettered, pending, "
            "last_error, updated_at) SELECT %s, %s, %s, %s, %s, %s, now() "
            "WHERE EXISTS (SELECT 1 FROM {h} WHERE webhook_id = %s) "
            "ON CONFLICT (webhook_id) DO UPDATE SET "
            "delivered = {s}.delivered + EXCLUDED.delivered, "
            "failed_attempts = {s}.failed_attempts + EXCLUDED.failed_attempts, "
            "dead_lettered = {s}.dead_lettered + EXCLUDED.dead_lettered, "
            "pending = COALESCE(EXCLUDED.pending, {s}.pending), "
            "last_error = COALESCE(EXCLUDED.last_error, {s}.last_error), updated_at = now()"
        ).format(s=_stats(schema), h=_hooks(schema)),
            (hook_id, *(int(d.get(k, 0)) for k in COUNTS), pending.get(hook_id),
             errors.get(hook_id), hook_id))


def read_stats(conn: Any, schema: str) -> list[WebhookStats]:
    """Every registered hook with its counters (zeros before its first report). Creates
    nothing: a deployment without webhooks answers ``[]``."""
    present = conn.execute("SELECT to_regclass(%s), to_regclass(%s)", (
        f'"{schema}".engramdb_webhooks', f'"{schema}".engramdb_webhook_stats')).fetchone()
    if present[0] is None:
        return []
    if present[1] is None:
        rows = conn.execute(sql.SQL(
            "SELECT webhook_id, url, agent_id, agent_prefix, 0, 0, 0, NULL, NULL, NULL FROM {} "
            "ORDER BY created_at").format(_hooks(schema))).fetchall()
    else:
        rows = conn.execute(sql.SQL(
            "SELECT h.webhook_id, h.url, h.agent_id, h.agent_prefix, COALESCE(s.delivered, 0), "
            "COALESCE(s.failed_attempts, 0), COALESCE(s.dead_lettered, 0), s.pending, "
            "s.last_error, s.updated_at FROM {} h LEFT JOIN {} s USING (webhook_id) "
            "ORDER BY h.created_at").format(_hooks(schema), _stats(schema))).fetchall()
    return [WebhookStats(webhook_id=r[0], url=r[1],
                         target=f"agent {r[2]}" if r[2] is not None else f"prefix {r[3]}*",
                         delivered=r[4], failed_attempts=r[5], dead_lettered=r[6], pending=r[7],
                         last_error=r[8], updated_at=r[9]) for r in rows]


def delete_stats(conn: Any, schema: str, webhook_id: str) -> None:
    ensure_stats_table(conn, schema)
    conn.execute(sql.SQL("DELETE FROM {} WHERE webhook_id = %s").format(_stats(schema)),
                 (webhook_id,))
