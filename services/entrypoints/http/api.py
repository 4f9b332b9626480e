"""HTTP surface of engramdb (FastAPI): retrieve, write, audit, health.

``create_app(memory)`` takes anything with the ``Memory`` facade's methods (``retrieve``,
``write``, ``history``, ``facts_as_of``, optionally ``health``); the facade is synchronous,
so every call runs on a worker thread (``anyio.to_thread``), never on the event loop.
Invalid input is a 422 whose ``detail`` names the offending field (pydantic's ``loc``), also
for per-call ``config_overrides``. ``python -m engramdb.services.entrypoints.http.api`` writes ``docs/openapi.json``.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import anyio
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from psycopg_pool import PoolTimeout
from pydantic import BaseModel, Field, ValidationError

from engramdb.domain.erasure import AgentErasedError
from engramdb.infra.api_keys import Grant
from engramdb.services.entrypoints.http.auth import authorize, require
from engramdb.services.entrypoints.http.docs import add_offline_docs
from engramdb.services.entrypoints.http.guard import (
    DEFAULT_MAX_BODY_BYTES,
    error_response,
    install_input_guards,
    json_safe,
)
from engramdb.services.entrypoints.http.manage_routes import forbid_unknown_query
from engramdb.services.entrypoints.http.manage_routes import router as manage_router
from engramdb.services.entrypoints.http.ui import mount_ui
from engramdb.services.retrieve.config import UnknownConfigKey
from engramdb.services.retrieve.models import RetrieveRequest, RetrieveResult
from engramdb.services.write.messages import ConversationMessage, MessageIdConflict

API_VERSION = "1"
_AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or unknown API key"},
    403: {"description": "the key does not cover this agent or scope"},
}


class ErrorDetail(BaseModel):
    loc: list[str | int] = Field(default_factory=list)
    msg: str
    type: str = "value_error"


class ErrorBody(BaseModel):
    detail: list[ErrorDetail]


class Health(BaseModel):
    status: str
    checks: dict[str, Any] = Field(default_factory=dict)


def _plain(value: Any) -> Any:
    """Pydantic models / lists of them / dicts -> JSON-ready data."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _unprocessable(loc: list[str | int], msg: str, kind: str = "value_error") -> JSONResponse:
    return error_response(422, loc, msg, kind)


def _from_validation(prefix: list[str | int], exc: ValidationError) -> JSONResponse:
    details = [
        {
            "loc": [*prefix, *err.get("loc", ())],
            "msg": err.get("msg", ""),
            "type": err.get("type", "value_error"),
        }
        for err in exc.errors(include_url=False, include_context=False, include_input=False)
    ]
    return JSONResponse(status_code=422, content=json_safe({"detail": details}))


def create_app(
    memory: Any, *, title: str = "engramdb", max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> FastAPI:
    app = FastAPI(
        title=title,
        version=API_VERSION,
        description="Event-sourced long-term memory for LLM agents: write conversation turns, "
        "retrieve scored facts and a prompt-ready context, audit how a memory came to be.",
        dependencies=[Depends(forbid_unknown_query)],
        docs_url=None,  # add_offline_docs serves /docs and /redoc without a CDN
        redoc_url=None,
    )
    add_offline_docs(app)
    app.state.memory = memory
    install_input_guards(app, max_body_bytes)

    @app.post(
        "/v1/retrieve",
        response_model=RetrieveResult,
        responses={422: {"model": ErrorBody}, **_AUTH_ERRORS},
        summary="Retrieve the facts and conversations relevant to a query",
    )
    async def retrieve(
        request: RetrieveRequest, grant: Annotated[Grant, Depends(require("read"))]
    ) -> Any:
        authorize(grant, "read", request.agent_id)
        try:
            result = await anyio.to_thread.run_sync(lambda: request.send_to(memory))
        except UnknownConfigKey as exc:
            return _unprocessable(
                ["body", "config_overrides", *exc.keys], str(exc), "extra_forbidden"
            )
        except ValidationError as exc:  # bad override values: name the config field
            return _from_validation(["body", "config_overrides"], exc)
        except TimeoutError as exc:
            raise HTTPException(status_code=504, detail=str(exc)) from exc
        except ValueError as exc:
            field = (
                "agent_id"
                if "agent_id" in str(exc)
                else "wait_for"
                if "wait_for" in str(exc)
                else "as_of"
                if str(exc).startswith("as_of")
                else "query"
            )
            return _unprocessable(["body", field], str(exc))
        return _plain(result)

    @app.post(
        "/v1/messages",
        responses={
            409: {"model": ErrorBody, "description": "the message id was already used with another text"},
            413: {"model": ErrorBody},
            422: {"model": ErrorBody},
            **_AUTH_ERRORS,
        },
        summary="Write one conversation turn (recorded first, then extracted)",
    )
    async def write_message(
        message: ConversationMessage,
        grant: Annotated[Grant, Depends(require("write"))],
        dry_run: Annotated[
            bool, Query(description="return the decisions that would be made; save nothing")
        ] = False,
    ) -> Any:
        authorize(grant, "write", message.agent_id)
        try:
            result = await anyio.to_thread.run_sync(
                lambda: memory.write(
                    message.agent_id,
                    message.text,
                    speaker=message.speaker,
                    session_id=message.session_id,
                    occurred_at=message.occurred_at,
                    message_id=message.message_id,
                    metadata=dict(message.metadata),
                    **({"dry_run": True} if dry_run else {}),
                )
            )
        except MessageIdConflict as exc:
            return error_response(409, ["body", "message_id"], str(exc), "message_id_conflict")
        return _plain(result)

    @app.get(
        "/v1/agents/{agent_id}/facts/{fact_id}/history",
        responses={404: {"description": "no decision ever touched this fact"}, **_AUTH_ERRORS},
        summary="Every decision that touched a fact, with the message that caused it",
    )
    async def history(
        agent_id: str, fact_id: str, grant: Annotated[Grant, Depends(require("read"))]
    ) -> Any:
        authorize(grant, "read", agent_id)
        entries = await anyio.to_thread.run_sync(lambda: memory.history(agent_id, fact_id))
        if not entries:
            raise HTTPException(
                status_code=404, detail=f"no history for fact {fact_id!r} of agent {agent_id!r}"
            )
        return _plain(entries)

    @app.get("/healthz", response_model=Health, summary="Liveness: the process answers")
    async def healthz() -> Health:
        return Health(status="ok")

    @app.get(
        "/readyz",
        response_model=Health,
        responses={503: {"model": Health}},
        summary="Readiness: database, broker and projections reachable",
    )
    async def readyz() -> Any:
        check = getattr(memory, "health", None)
        if check is None:
            return Health(status="ok")
        try:
            report = await anyio.to_thread.run_sync(check)
        except Exception as exc:
            return JSONResponse(
                status_code=503, content={"status": "unavailable", "checks": {"error": str(exc)}}
            )
        data = _plain(report) if report is not None else {}
        if isinstance(data, bool):
            data = {"ok": data}
        ok = (
            data.get("ok", data.get("status", "ok") in ("ok", True))
            if isinstance(data, dict)
            else bool(data)
        )
        body = {
            "status": "ok" if ok else "unavailable",
            "checks": data if isinstance(data, dict) else {"value": data},
        }
        return JSONResponse(status_code=200 if ok else 503, content=body)

    app.include_router(manage_router)
    mount_ui(app)  # the web inspector at /ui (ADR-0044)
    @app.get(
        "/metrics",
        response_class=Response,
        responses={
            200: {"content": {"text/plain": {}}, "description": "Prometheus text format"},
            404: {"description": "this process keeps no metrics"},
        },
        summary="Prometheus metrics: lags, retrieve latency, dead letters, LLM errors, restarts",
    )
    async def metrics() -> Response:
        registry = getattr(memory, "metrics", None)
        if registry is None:
            raise HTTPException(status_code=404, detail="this process keeps no metrics")
        body = await anyio.to_thread.run_sync(registry.exposition)
        return Response(content=body, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.exception_handler(AgentErasedError)
    async def _erased(_request: Request, exc: AgentErasedError) -> JSONResponse:
        return JSONResponse(status_code=410, content={"detail": str(exc)})  # ADR-0018

    @app.exception_handler(ValidationError)
    async def _validation(_request: Request, exc: ValidationError) -> JSONResponse:
        return _from_validation(["body"], exc)

    @app.exception_handler(PoolTimeout)
    async def _busy(_request: Request, exc: PoolTimeout) -> JSONResponse:
        # overload, not a fault: every database connection stayed busy for the pool's timeout
        return JSONResponse(
            status_code=503,
            headers={"Retry-After": "1"},
            content={"detail": f"all database connections are busy ({exc}); retry shortly"},
        )

    return app


def export_openapi(path: str | Path = "docs/openapi.json") -> Path:
    """Write the OpenAPI document (no memory needed: the schema does not depend on it)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = create_app(memory=None).openapi()
    out.write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


if __name__ == "__main__":  # python -m engramdb.services.entrypoints.http.api [path]
    print(export_openapi(*(sys.argv[1:2] or ["docs/openapi.json"])))
