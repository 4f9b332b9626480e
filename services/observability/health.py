"""Readiness of one engramdb process: database, broker, projection lag (``Memory.health``).

Why a module of its own: ``/readyz`` must tell an orchestrator whether to send traffic here,
and "the process answers" (``/healthz``) is not that. A replica is ready when its database
answers, the NATS server it uses (if any) answers, and the read models it serves are not too
far behind the event log. Every probe has a short timeout and turns failure into a reason
string instead of an exception, so a probe never hangs or 500s the endpoint.

Lag is measured the same way in every deployment — each projection's tracking position
(data in PostgreSQL) against the log's max notification id — so a ``retrieve`` replica reports
the lag of projectors running in another process, too.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Literal
from urllib.parse import urlsplit

from psycopg_pool import ConnectionPool
from pydantic import BaseModel, Field

from engramdb.projections.runner import PROJECTION_NAMES, ProjectionSet, tracking_positions
from engramdb.services.management.webhook_stats import WebhookStats

DEFAULT_MAX_LAG = 1000  # events; a burst of writes is normal, a stuck projector is not
DEFAULT_TIMEOUT = 2.0  # seconds per probe

Status = Literal["up", "down", "not configured"]


class ComponentHealth(BaseModel):
    status: Status
    latency_ms: float | None = None
    detail: str | None = None


class ProjectionHealth(BaseModel):
    position: int | None = Field(description="last notification id applied (None: none yet)")
    lag: int | None = Field(description="events in the log not yet applied (None: unknown)")
    running: bool | None = Field(
        default=None, description="in-process projector alive (None: runs in another process)"
    )
    restarts: int | None = Field(
        default=None, description="restarts after errors (None: runs in another process)"
    )
    standby: bool | None = Field(
        default=None, description="another process runs it; this one takes over if that one dies"
    )
    last_error: str | None = Field(
        default=None, description="the error that last stopped it, while not yet recovered"
    )


class HealthReport(BaseModel):
    """What ``/readyz`` returns; ``ok`` decides 200 vs 503 and ``reasons`` says why not."""

    ok: bool
    reasons: list[str] = Field(default_factory=list)
    database: ComponentHealth
    nats: ComponentHealth
    head: int | None = Field(default=None, description="max notification id of the event log")
    max_lag: int
    projections: dict[str, ProjectionHealth] = Field(default_factory=dict)
    extraction_pending: int | None = Field(
        default=None,
        description="messages an LLM outage left unextracted (ADR-0014); informational: "
        "they are re-extracted when the LLM answers, readiness does not depend on them",
    )
    extraction_retrier: str | None = Field(
        default=None,
        description="the process re-extracting pending messages ('engramdb-retrier host:pid', "
        "ADR-0029); None: none runs (no `serve` with an LLM)",
    )
    webhooks: list[WebhookStats] | None = Field(
        default=None,
        description="registered webhooks and their deliveries (ADR-0049; `engramdb status` only); "
        "informational: readiness does not depend on a receiver",
    )


def check_database(pool: ConnectionPool, timeout: float = DEFAULT_TIMEOUT) -> ComponentHealth:
    """``SELECT 1`` on a pooled connection (the connection the retriever itself would use)."""
    started = time.monotonic()
    try:
        with pool.connection(timeout=timeout) as conn:
            conn.execute("SELECT 1").fetchone()
    except Exception as exc:  # noqa: BLE001 - any failure is "down", with the reason
        return ComponentHealth(status="down", detail=f"{type(exc).__name__}: {exc}".strip())
    return ComponentHealth(status="up", latency_ms=_ms_since(started))


def check_nats(url: str | None, timeout: float = DEFAULT_TIMEOUT) -> ComponentHealth:
    """Reachability of the first NATS server in ``url``: it greets every client with ``INFO``.

    A TCP probe rather than a client connection: it is synchronous (``/readyz`` runs it on a
    worker thread), needs no event loop, and does not create a client the server must track.
    It does not check credentials; the consumers would fail loudly on those anyway.
    """
    if not url:
        return ComponentHealth(status="not configured")
    first = url.split(",")[0].strip()
    parts = urlsplit(first if "://" in first else f"nats://{first}")
    host, port = parts.hostname or "127.0.0.1", parts.port or 4222
    started = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            greeting = sock.recv(4)
    except OSError as exc:
        return ComponentHealth(status="down", detail=f"{host}:{port}: {exc}")
    if greeting != b"INFO":
        return ComponentHealth(status="down", detail=f"{host}:{port} is not a NATS server")
    return ComponentHealth(status="up", latency_ms=_ms_since(started))


def check_health(
    *,
    pool: ConnectionPool,
    schema: str,
    head: Callable[[], int | None],
    projections: ProjectionSet | None,
    nats_url: str | None,
    max_lag: int = DEFAULT_MAX_LAG,
    timeout: float = DEFAULT_TIMEOUT,
) -> HealthReport:
    """The full report; lag is only read when the database answered (else it is unknown)."""
    database = check_database(pool, timeout)
    nats = check_nats(nats_url, timeout)
    reasons: list[str] = []
    if database.status != "up":
        reasons.append(f"database down: {database.detail}")
    if nats.status == "down":
        reasons.append(f"nats down: {nats.detail}")
    log_head: int | None = None
    lags: dict[str, ProjectionHealth] = {}
    if database.status == "up":
        try:
            log_head = head() or 0
            with pool.connection(timeout=timeout) as conn:
                positions = tracking_positions(conn, schema, PROJECTION_NAMES)
        except Exception as exc:  # noqa: BLE001
            reasons.append(f"projection positions unreadable: {type(exc).__name__}: {exc}")
        else:
            status = projections.status() if projections is not None else {}
            for name, position in positions.items():
                lag = max(log_head - (position or 0), 0)
                state = status.get(name)
                lags[name] = ProjectionHealth(
                    position=position,
                    lag=lag,
                    running=state.running if state else None,
                    standby=state.standby if state else None,
                    restarts=state.restarts if state else None,
                    last_error=state.last_error if state and state.failing else None,
                )
                if state is not None and not state.running and not state.standby:
                    why = f": {state.last_error}" if state.last_error else ""
                    reasons.append(f"projection {name!r} has stopped{why} (restarting)")
                elif state is not None and state.failing:
                    reasons.append(
                        f"projection {name!r} is recovering from {state.last_error} "
                        f"({state.restarts} restart(s))"
                    )
                if lag > max_lag:
                    reasons.append(f"projection {name!r} lags {lag} events (max {max_lag})")
    return HealthReport(
        ok=not reasons,
        reasons=reasons,
        database=database,
        nats=nats,
        head=log_head,
        max_lag=max_lag,
        projections=lags,
    )


def _ms_since(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 2)


def unreachable_report(error: BaseException, max_lag: int = DEFAULT_MAX_LAG) -> HealthReport:
    """The report when the database cannot even be opened (``engramdb status``)."""
    detail = " ".join(f"{type(error).__name__}: {error}".split())
    return HealthReport(
        ok=False,
        reasons=[f"database down: {detail}"],
        database=ComponentHealth(status="down", detail=detail),
        nats=ComponentHealth(status="not configured", detail="not checked"),
        max_lag=max_lag,
    )


def format_report(report: HealthReport) -> str:
    """Human-readable ``engramdb status`` output: verdict, components, one line per projection."""
    lines = [f"status: {'ok' if report.ok else 'UNHEALTHY'}"]
    for name, comp in (("database", report.database), ("nats", report.nats)):
        extra = f" ({comp.latency_ms} ms)" if comp.latency_ms is not None else ""
        extra += f" - {comp.detail}" if comp.detail else ""
        lines.append(f"{name}: {comp.status}{extra}")
    if report.head is not None:
        lines.append(f"event log head: {report.head}   (max lag {report.max_lag} events)")
    for name, proj in report.projections.items():
        running = "" if proj.running is None else ("  running" if proj.running else "  STOPPED")
        running = "  standby" if proj.standby else running
        restarts = f"  restarts {proj.restarts}" if proj.restarts else ""
        lines.append(f"projection {name}: position {proj.position}  lag {proj.lag}{running}{restarts}")
    if report.extraction_pending is not None:
        lines.append(f"extraction pending: {report.extraction_pending} message(s)"
                     + ("  (see `engramdb pending`)" if report.extraction_pending else ""))
    if report.extraction_retrier is not None:
        lines.append(f"extraction retrier: {report.extraction_retrier}")
    for hook in report.webhooks or []:
        pending = "?" if hook.pending is None else str(hook.pending)
        error = f"  last error: {hook.last_error}" if hook.last_error else ""
        lines.append(f"webhook {hook.webhook_id} ({hook.target}): delivered {hook.delivered}  "
                     f"failed attempts {hook.failed_attempts}  dead-lettered {hook.dead_lettered}  "
                     f"pending {pending}{error}")
    lines.extend(f"! {reason}" for reason in report.reasons)
    return "\n".join(lines)
