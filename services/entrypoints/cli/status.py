"""``engramdb status``: the readiness report of a deployment, seen from outside its processes.

Why not just ``Memory.open().health()``: on the embedded default, opening memory *starts*
PostgreSQL and NATS when they are not running, and a status command that brings up what it
should report on would always say "up". The LLM of each operation (ADR-0052) is shown from
the settings, never its key. So an embedded server that is not running is reported
down (with what to do), and only running ones are connected to. Projector liveness is unknown
from here (the projectors run in ``serve``); their lag, read from PostgreSQL, is the signal.
"""

from __future__ import annotations

from typing import Any

from engramdb.infra.database import resolve_nats
from engramdb.infra.embedded_nats import nats_running
from engramdb.infra.embedded_postgres import postgres_running
from engramdb.infra.providers.factory import make_operation_llms
from engramdb.infra.settings import Settings
from engramdb.services.entrypoints.cli.status_owners import down_advice
from engramdb.services.memory.facade import Memory
from engramdb.services.observability.health import ComponentHealth, HealthReport, unreachable_report


def deployment_status(settings: Settings, max_lag: int | None = None) -> HealthReport:
    lag_limit = settings.ready_max_lag if max_lag is None else max_lag
    if settings.database_url is None and postgres_running(settings.data_dir) is None:
        return unreachable_report(
            RuntimeError(down_advice(settings.data_dir, "postgres", "ENGRAMDB_DATABASE_URL")),
            lag_limit,
        )
    try:
        memory = Memory.open(settings, start_projectors=False, quiet=True)
    except Exception as exc:  # noqa: BLE001 - an unreachable database is a status, not a crash
        return unreachable_report(exc, lag_limit)
    with memory:
        nats_error = None
        if settings.nats_url is None and nats_running(settings.data_dir) is None:
            nats_error = down_advice(settings.data_dir, "nats", "ENGRAMDB_NATS_URL")
        else:
            try:
                memory.nats_url = resolve_nats(settings)
            except Exception as exc:  # noqa: BLE001
                nats_error = f"{type(exc).__name__}: {exc}"
        report = memory.health(max_lag=lag_limit)
        try:
            report.webhooks = memory.webhook_stats()  # ADR-0049: informational, never unhealthy
        except Exception as exc:  # noqa: BLE001 - a status, not a crash
            report.reasons.append(f"webhook stats unreadable: {type(exc).__name__}: {exc}")
    if nats_error is not None:
        report.nats = ComponentHealth(status="down", detail=nats_error)
        report.reasons.append(f"nats down: {nats_error}")
        report.ok = False
    return report


def llm_operations(settings: Settings) -> dict[str, dict[str, Any]]:
    """Per LLM operation (ADR-0052): the model provenance records, the endpoint's host and
    whether it is the operation's own setting or the global one — never a key. Read from the
    settings of this command's environment (the one ``serve`` is started with, in a
    deployment that shares it); building the clients makes no request."""
    return make_operation_llms(settings).describe()


def format_llm_operations(described: dict[str, dict[str, Any]]) -> list[str]:
    """``llm: ...`` once when every operation shares one model, else one line per operation."""
    def line(d: dict[str, Any]) -> str:
        if d["model"] is None:
            return "none (offline)"
        at = f" @ {d['endpoint']}" if d.get("endpoint") else ""
        return f"{d['model']}{at}  ({d['configured']})"

    shown = {op: line(d) for op, d in described.items()}
    if len(set(shown.values())) == 1:
        return [f"llm (every operation): {next(iter(shown.values()))}"]
    return [f"llm {op}: {text}" for op, text in shown.items()]
