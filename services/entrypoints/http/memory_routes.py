"""HTTP routes for the memory itself: retrieve, write a turn, a fact's or an agent's history.

The facade (``request.app.state.memory``) is synchronous, so every call runs on a worker
thread (``anyio.to_thread``), never on the event loop. Invalid input is a 422 naming the
field, also for per-call ``config_overrides``.
"""

from __future__ import annotations

from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Body, Depends, HTTPException, Query, Request
from pydantic import ValidationError

from engramdb.infra.api_keys import Grant
from engramdb.services.entrypoints.http.auth import authorize, require
from engramdb.services.entrypoints.http.errors import (
    AUTH_ERRORS,
    ErrorBody,
    from_validation,
    plain,
    unprocessable,
)
from engramdb.services.entrypoints.http.guard import error_response
from engramdb.services.entrypoints.http.openapi_examples import RETRIEVE_EXAMPLES, WRITE_EXAMPLES
from engramdb.services.management.audit_models import HistoryEntry
from engramdb.services.retrieve.config import UnknownConfigKey
from engramdb.services.retrieve.models import RetrieveRequest, RetrieveResult
from engramdb.services.write.messages import ConversationMessage, MessageIdConflict
from engramdb.services.write.models import WriteResult

router = APIRouter(tags=["memory"])


def _field_of(exc: ValueError) -> str:
    """Which request field a facade ``ValueError`` is about (its message names it)."""
    text = str(exc)
    if "agent_id" in text:
        return "agent_id"
    if "wait_for" in text:
        return "wait_for"
    if text.startswith("as_of"):
        return "as_of"
    return "query"


@router.post(
    "/v1/retrieve",
    response_model=RetrieveResult,
    responses={422: {"model": ErrorBody}, **AUTH_ERRORS},
    summary="Retrieve the facts and conversations relevant to a query",
)
async def retrieve(
    request: Annotated[RetrieveRequest, Body(openapi_examples=RETRIEVE_EXAMPLES)],
    http: Request,
    grant: Annotated[Grant, Depends(require("read"))],
) -> Any:
    authorize(grant, "read", request.agent_id)
    memory = http.app.state.memory
    try:
        result = await anyio.to_thread.run_sync(lambda: request.send_to(memory))
    except UnknownConfigKey as exc:
        return unprocessable(["body", "config_overrides", *exc.keys], str(exc), "extra_forbidden")
    except ValidationError as exc:  # bad override values: name the config field
        return from_validation(["body", "config_overrides"], exc)
    except TimeoutError as exc:
        raise HTTPException(status_code=504, detail=str(exc)) from exc
    except ValueError as exc:
        return unprocessable(["body", _field_of(exc)], str(exc))
    return plain(result)


@router.post(
    "/v1/messages",
    responses={
        200: {"model": WriteResult, "description": "the decisions (typed for the docs; not re-validated)"},
        409: {"model": ErrorBody, "description": "the message id was already used with another text"},
        413: {"model": ErrorBody},
        422: {"model": ErrorBody},
        **AUTH_ERRORS,
    },
    summary="Write one conversation turn (recorded first, then extracted)",
)
async def write_message(
    message: Annotated[ConversationMessage, Body(openapi_examples=WRITE_EXAMPLES)],
    http: Request,
    grant: Annotated[Grant, Depends(require("write"))],
    dry_run: Annotated[
        bool, Query(description="return the decisions that would be made; save nothing")
    ] = False,
) -> Any:
    authorize(grant, "write", message.agent_id)
    memory = http.app.state.memory
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
                infer=message.infer,
                **({"dry_run": True} if dry_run else {}),
            )
        )
    except MessageIdConflict as exc:
        return error_response(409, ["body", "message_id"], str(exc), "message_id_conflict")
    return plain(result)


@router.get(
    "/v1/agents/{agent_id}/facts/{fact_id}/history",
    responses={
        200: {"model": list[HistoryEntry], "description": "oldest first"},
        404: {"description": "no decision ever touched this fact"},
        **AUTH_ERRORS,
    },
    summary="Every decision that touched a fact, with the message that caused it",
)
async def history(
    agent_id: str, fact_id: str, http: Request, grant: Annotated[Grant, Depends(require("read"))]
) -> Any:
    authorize(grant, "read", agent_id)
    memory = http.app.state.memory
    entries = await anyio.to_thread.run_sync(lambda: memory.history(agent_id, fact_id))
    if not entries:
        raise HTTPException(
            status_code=404, detail=f"no history for fact {fact_id!r} of agent {agent_id!r}"
        )
    return plain(entries)


@router.get(
    "/v1/agents/{agent_id}/history",
    responses={200: {"model": list[HistoryEntry], "description": "oldest first"},
               422: {"model": ErrorBody}, **AUTH_ERRORS},
    summary="Every decision of an agent, oldest first (as `engramdb history --agent`)",
)
async def agent_history(
    agent_id: str,
    http: Request,
    grant: Annotated[Grant, Depends(require("read"))],
    after_version: Annotated[
        int, Query(ge=0, le=2**53, description="only decisions after this version (the last one you got)")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=5000, description="decisions per page")] = 500,
) -> Any:
    authorize(grant, "read", agent_id)
    memory = http.app.state.memory
    try:
        entries = await anyio.to_thread.run_sync(lambda: memory.history(agent_id))
    except ValueError as exc:
        return unprocessable(["path", "agent_id"], str(exc))
    return plain([e for e in entries if e.version > after_version][:limit])
