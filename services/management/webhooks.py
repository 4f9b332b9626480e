"""Webhook registrations (ADR-0049): which URL receives which agents' changes, and with what
secret. Stored in the deployment's first cell (``engramdb_webhooks``), read by the dispatcher.

Why these refusals: a webhook makes this deployment send requests where a caller says, so
the URL is untrusted input. Only ``http``/``https`` with a host; never this deployment itself
(its HTTP port on a local address, or its NATS): a hook pointing back would feed its own
changes into its own API. A secret of at least 16 characters signs every delivery (HMAC-SHA256
over ``<timestamp>.<body>``); it is returned once, at registration, and never in a list.
"""

from __future__ import annotations

import ipaddress
import secrets
import socket
import uuid
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from psycopg import sql
from pydantic import BaseModel, Field

from engramdb.domain.agent_id import check_agent_id
from engramdb.services.management.webhook_stats import delete_stats


class WebhookRefused(ValueError):
    """A registration that cannot be accepted; the message says why."""


class Webhook(BaseModel):
    webhook_id: str
    url: str
    agent_id: str | None = Field(default=None, description="one agent's changes")
    agent_prefix: str | None = Field(default=None, description="changes of agents whose id starts so")
    max_attempts: int = 8
    created_at: datetime | None = None
    secret: str | None = Field(default=None, description="only in the registration's answer")

    def matches(self, agent_id: str) -> bool:
        if self.agent_id is not None:
            return agent_id == self.agent_id
        return agent_id.startswith(self.agent_prefix or "")


def _local(host: str) -> bool:
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    for info in infos:
        addr = ipaddress.ip_address(info[4][0])
        if addr.is_loopback or addr.is_unspecified:
            return True
        try:
            if addr in {ipaddress.ip_address(a[4][0]) for a in socket.getaddrinfo(socket.gethostname(), None)}:
                return True
        except OSError:
            pass
    return False


def check_webhook_url(url: str, own_ports: set[int]) -> str:
    """``url`` if it may receive deliveries, else ``WebhookRefused`` saying why."""
    if len(url) > 2000 or any(c in url for c in "\x00\r\n "):
        raise WebhookRefused("url is not a URL")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise WebhookRefused(f"url scheme {parts.scheme!r}: only http and https")
    if not parts.hostname:
        raise WebhookRefused("url has no host")
    if parts.username or parts.password:
        raise WebhookRefused("url carries credentials: use the secret instead")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise WebhookRefused("url has an invalid port") from None
    if port in own_ports and _local(parts.hostname):
        raise WebhookRefused("url points back at this deployment")
    return url


def _table(schema: str) -> sql.Composable:
    return sql.Identifier(schema, "engramdb_webhooks")


def ensure_table(conn: Any, schema: str) -> None:
    conn.execute(sql.SQL(
        "CREATE TABLE IF NOT EXISTS {} (webhook_id text PRIMARY KEY, url text NOT NULL, "
        "agent_id text, agent_prefix text, secret text NOT NULL, max_attempts int NOT NULL, "
        "created_at timestamptz NOT NULL DEFAULT now())").format(_table(schema)))


def register(conn: Any, schema: str, url: str, *, own_ports: set[int], agent_id: str | None = None,
             agent_prefix: str | None = None, secret: str | None = None,
             max_attempts: int = 8) -> Webhook:
    if (agent_id is None) == (agent_prefix is None):
        raise WebhookRefused("give agent_id or agent_prefix (\"\" for every agent)")
    if agent_id is not None:
        check_agent_id(agent_id)
    if secret is not None and len(secret) < 16:
        raise WebhookRefused("secret: at least 16 characters")
    if not 1 <= max_attempts <= 50:
        raise WebhookRefused("max_attempts: 1 to 50")
    check_webhook_url(url, own_ports)
    hook = Webhook(webhook_id="wh_" + uuid.uuid4().hex[:16], url=url, agent_id=agent_id,
                   agent_prefix=agent_prefix, max_attempts=max_attempts,
                   secret=secret or secrets.token_urlsafe(32))
    ensure_table(conn, schema)
    row = conn.execute(sql.SQL(
        "INSERT INTO {} (webhook_id, url, agent_id, agent_prefix, secret, max_attempts) "
        "VALUES (%s, %s, %s, %s, %s, %s) RETURNING created_at").format(_table(schema)),
        (hook.webhook_id, url, agent_id, agent_prefix, hook.secret, max_attempts)).fetchone()
    hook.created_at = row[0]
    return hook


def list_hooks(conn: Any, schema: str, *, with_secrets: bool = False) -> list[Webhook]:
    ensure_table(conn, schema)
    rows = conn.execute(sql.SQL(
        "SELECT webhook_id, url, agent_id, agent_prefix, secret, max_attempts, created_at "
        "FROM {} ORDER BY created_at").format(_table(schema))).fetchall()
    return [Webhook(webhook_id=r[0], url=r[1], agent_id=r[2], agent_prefix=r[3],
                    secret=r[4] if with_secrets else None, max_attempts=r[5], created_at=r[6])
            for r in rows]


def delete(conn: Any, schema: str, webhook_id: str) -> bool:
    ensure_table(conn, schema)
    done = conn.execute(sql.SQL("DELETE FROM {} WHERE webhook_id = %s").format(_table(schema)),
                        (webhook_id,))
    delete_stats(conn, schema, webhook_id)
    return bool(done.rowcount)
