"""Liveness, readiness and Prometheus metrics routes (no key needed: see ADR-0011).

``/readyz`` turns the facade's ``health()`` report into 200 / 503 so an orchestrator can
hold traffic until the database, broker and projections are reachable.
"""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from engramdb.services.entrypoints.http.errors import plain

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str
    checks: dict[str, Any] = Field(default_factory=dict)


@router.get("/healthz", response_model=Health, summary="Liveness: the process answers")
async def healthz() -> Health:
    return Health(status="ok")


def _readiness(report: Any) -> tuple[bool, dict[str, Any]]:
    """(ready?, checks) from whatever ``health()`` returned: a model, a dict or a bool."""
    data = plain(report) if report is not None else {}
    if isinstance(data, bool):
        data = {"ok": data}
    if not isinstance(data, dict):
        return bool(data), {"value": data}
    return bool(data.get("ok", data.get("status", "ok") in ("ok", True))), data


@router.get(
    "/readyz",
    response_model=Health,
    responses={503: {"model": Health}},
    summary="Readiness: database, broker and projections reachable",
)
async def readyz(http: Request) -> Any:
    check = getattr(http.app.state.memory, "health", None)
    if check is None:
        return Health(status="ok")
    try:
        report = await anyio.to_thread.run_sync(check)
    except Exception as exc:
        return JSONResponse(
            status_code=503, content={"status": "unavailable", "checks": {"error": str(exc)}}
        )
    ok, checks = _readiness(report)
    body = {"status": "ok" if ok else "unavailable", "checks": checks}
    return JSONResponse(status_code=200 if ok else 503, content=body)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {"content": {"text/plain": {}}, "description": "Prometheus text format"},
        404: {"description": "this process keeps no metrics"},
    },
    summary="Prometheus metrics: lags, retrieve latency, dead letters, LLM errors, restarts",
)
async def metrics(http: Request) -> Response:
    registry = getattr(http.app.state.memory, "metrics", None)
    if registry is None:
        raise HTTPException(status_code=404, detail="this process keeps no metrics")
    body = await anyio.to_thread.run_sync(registry.exposition)
    return Response(content=body, media_type="text/plain; version=0.0.4; charset=utf-8")
