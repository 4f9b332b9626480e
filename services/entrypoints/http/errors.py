"""The HTTP error shapes and the exception handlers every route shares.

A 422's ``detail`` is pydantic's list of ``{loc, msg, type}`` so a client can point at the
offending field; an erased agent is a 410 (ADR-0018); a saturated pool is a 503 with
``Retry-After`` — overload, not a fault.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout
from pydantic import BaseModel, Field, ValidationError

from engramdb.domain.erasure import AgentErasedError
from engramdb.services.entrypoints.http.guard import error_response, json_safe

AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or unknown API key"},
    403: {"description": "the key does not cover this agent or scope"},
}


class ErrorDetail(BaseModel):
    loc: list[str | int] = Field(default_factory=list)
    msg: str
    type: str = "value_error"


class ErrorBody(BaseModel):
    detail: list[ErrorDetail]


def plain(value: Any) -> Any:
    """Pydantic models / lists of them / dicts -> JSON-ready data."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def unprocessable(loc: list[str | int], msg: str, kind: str = "value_error") -> JSONResponse:
    return error_response(422, loc, msg, kind)


def from_validation(prefix: list[str | int], exc: ValidationError) -> JSONResponse:
    details = [
        {
            "loc": [*prefix, *err.get("loc", ())],
            "msg": err.get("msg", ""),
            "type": err.get("type", "value_error"),
        }
        for err in exc.errors(include_url=False, include_context=False, include_input=False)
    ]
    return JSONResponse(status_code=422, content=json_safe({"detail": details}))


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AgentErasedError)
    async def _erased(_request: Request, exc: AgentErasedError) -> JSONResponse:
        return JSONResponse(status_code=410, content={"detail": str(exc)})  # ADR-0018

    @app.exception_handler(ValidationError)
    async def _validation(_request: Request, exc: ValidationError) -> JSONResponse:
        return from_validation(["body"], exc)

    @app.exception_handler(PoolTimeout)
    async def _busy(_request: Request, exc: PoolTimeout) -> JSONResponse:
        # overload, not a fault: every database connection stayed busy for the pool's timeout
        return JSONResponse(
            status_code=503,
            headers={"Retry-After": "1"},
            content={"detail": f"all database connections are busy ({exc}); retry shortly"},
        )
