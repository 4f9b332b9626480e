"""HTTP routes for managing memory (``/v1/agents...``): the ``Memory`` management methods
one-to-one, same names for filters and fields (``services/management/models.py``).

Every per-agent route has ``agent_id`` as a path parameter (``/v1/agents/{agent_id}/...``)
so per-agent access rules apply to it by path; listing agents (``GET /v1/agents``) spans
agents and is an admin-style route. Query parameters are declared as one model per route
with ``extra="forbid"``; ``forbid_unknown_query`` does the same for any route (the app
installs it for all), so a misspelt filter is a 422 naming it, never silently ignored.

Errors: an unknown agent or fact is a 404, deleting a fact that already ended a 409, an
invalid agent id / cursor / actor a 422. The facade is synchronous: calls run on a thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Body, Depends, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel

from engramdb.domain.agent_id import AGENT_ID_PATTERN, AGENT_ID_RULE
from engramdb.infra.api_keys import Grant
from engramdb.services.entrypoints.http import metadata_query
from engramdb.services.entrypoints.http.auth import OPEN, authorize, check_key, require
from engramdb.services.entrypoints.http.metadata_query import EntityQuery, FactQuery, MessageQuery
from engramdb.services.management.models import (
    ActorBody,
    AgentItem,
    DeleteResult,
    EntityItem,
    EraseResult,
    FactDetail,
    FactItem,
    ForgetResult,
    MessageItem,
    NotActiveError,
    NotFoundError,
    Page,
    PageParams,
    ReprocessResult,
)

AgentId = Annotated[
    str, Path(pattern=AGENT_ID_PATTERN, max_length=200, description=f"the agent: {AGENT_ID_RULE}")
]
FactId = Annotated[str, Path(min_length=1, max_length=200)]

router = APIRouter(prefix="/v1/agents", tags=["manage"])


def _guard(scope: str) -> Any:
    """Route dependency (ADR-0011): the key holds ``scope`` for the path's ``agent_id``
    (or, on ``GET /v1/agents``, which spans agents, holds ``scope`` outright)."""
    needs = require(scope)

    async def dependency(request: Request, grant: Grant = Depends(needs)) -> Grant:  # noqa: B008
        agent_id = request.path_params.get("agent_id")
        if agent_id is not None:
            authorize(grant, scope, agent_id)
        return grant

    return Depends(dependency)


ReadGrant = Annotated[Grant, _guard("read")]
WriteGrant = Annotated[Grant, _guard("write")]
AdminGrant = Annotated[Grant, _guard("admin")]


def _actor(grant: Grant, asked: str | None) -> str | None:
    """Who asked: the caller's words, else the API key's id (so a deletion names its key)."""
    if asked is not None or grant is OPEN:
        return asked
    return f"key:{grant.key_id}"

_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "no such agent or fact"},
    422: {"description": "invalid agent id, filter, cursor or unknown query parameter"},
}


def _query_names(dependant: Any) -> set[str]:
    names: set[str] = set()
    for field in dependant.query_params:
        annotation = getattr(field.field_info, "annotation", None)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names |= {f.alias or n for n, f in annotation.model_fields.items()}
        else:
            names.add(field.alias)
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def forbid_unknown_query(request: Request) -> None:
    """422 for a query parameter the route does not declare (FastAPI would ignore it)."""
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is None:
        return
    allowed = _query_names(dependant)
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        check_key(request)  # the key comes first: a stranger learns no schema (issue 28)
        accepted = ", ".join(sorted(allowed)) or "none"
        raise RequestValidationError(
            [
                {
                    "loc": ("query", name),
                    "msg": f"unknown query parameter {name!r}; this route accepts: {accepted}",
                    "type": "extra_forbidden",
                }
                for name in unknown
            ]
        )


async def _call(request: Request, fn: Callable[[Any], Any]) -> Any:
    memory = request.app.state.memory
    try:
        return await anyio.to_thread.run_sync(lambda: fn(memory))
    except NotFoundError as exc:
        raise HTTPException(status_code=404, detail=str(exc)) from exc
    except NotActiveError as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from exc
    except ValueError as exc:  # cursor, actor, agent id: the caller's input
        field = next((f for f in ("cursor", "actor", "agent_id") if f in str(exc)), "query")
        raise RequestValidationError(
            [{"loc": ("query", field), "msg": str(exc), "type": "value_error"}]
        ) from exc


@router.get("", response_model=Page[AgentItem], responses=_ERRORS, summary="List agents")
async def list_agents(
    request: Request, page: Annotated[PageParams, Query()], grant: AdminGrant
) -> Any:
    """Only the agents the key covers (issue 28): a tenant's admin key sees its tenant."""
    agents = None if grant is OPEN else list(grant.agents)
    return await _call(
        request,
        lambda m: m.list_agents(limit=page.limit, cursor=page.cursor, agents=agents),
    )


@router.get(
    "/{agent_id}/facts",
    response_model=Page[FactItem],
    responses=_ERRORS,
    summary="List an agent's facts (active by default), filtered, a page at a time",
)
async def list_facts(
    request: Request,
    agent_id: AgentId,
    flt: Annotated[FactQuery, Query()],
    _grant: ReadGrant,
) -> Any:
    fields, tree = metadata_query.split(flt)
    return await _call(request, lambda m: m.list_facts(agent_id, **fields, metadata=tree))


@router.get(
    "/{agent_id}/facts/{fact_id}",
    response_model=FactDetail,
    responses=_ERRORS,
    summary="One fact with its provenance (source messages, history link)",
)
async def get_fact(
    request: Request, agent_id: AgentId, fact_id: FactId, _grant: ReadGrant
) -> Any:
    return await _call(request, lambda m: m.get_fact(agent_id, fact_id))


@router.delete(
    "/{agent_id}/facts/{fact_id}",
    response_model=DeleteResult,
    responses={**_ERRORS, 409: {"description": "the fact is no longer active"}},
    summary="Delete a fact: a retraction by the user (an event; history keeps it)",
)
async def delete_fact(
    request: Request,
    agent_id: AgentId,
    fact_id: FactId,
    grant: WriteGrant,
    actor: Annotated[str | None, Query(max_length=200, description="who asked")] = None,
) -> Any:
    who = _actor(grant, actor)
    return await _call(request, lambda m: m.delete_fact(agent_id, fact_id, actor=who, via="http"))


@router.post(
    "/{agent_id}/forget",
    response_model=ForgetResult,
    responses=_ERRORS,
    summary="Forget everything about an agent: ends all its facts, hides its messages",
)
async def forget_agent(
    request: Request,
    agent_id: AgentId,
    grant: AdminGrant,
    body: Annotated[ActorBody | None, Body()] = None,
) -> Any:
    who = _actor(grant, body.actor if body is not None else None)
    return await _call(request, lambda m: m.forget_agent(agent_id, actor=who, via="http"))


@router.post(
    "/{agent_id}/erase",
    response_model=EraseResult,
    responses=_ERRORS,
    summary="Erase an agent (crypto-shredding): destroy its key, drop its read-model rows",
)
async def erase_agent(
    request: Request,
    agent_id: AgentId,
    grant: AdminGrant,
    body: Annotated[ActorBody | None, Body()] = None,
) -> Any:
    """Irreversible (ADR-0018): the agent's events stay in the log but can no longer be read,
    its read-model rows and cached vectors are deleted, and writes for it are refused (410).
    Erasing again repeats the cleanup and answers ``already_erased: true``."""
    who = _actor(grant, body.actor if body is not None else None)
    return await _call(request, lambda m: m.erase_agent(agent_id, actor=who, via="http"))


@router.post(
    "/{agent_id}/reprocess",
    response_model=ReprocessResult,
    responses={**_ERRORS, 409: {"description": "the message is not processed yet"}},
    summary="Re-extract processed messages with the current extractor (new events supersede)",
)
async def reprocess(
    request: Request,
    agent_id: AgentId,
    _grant: AdminGrant,
    message_id: Annotated[
        str | None, Query(min_length=1, max_length=200, description="one message (default: all)")
    ] = None,
) -> Any:
    """ADR-0023: the facts the message(s) alone produced end (``reprocessed``) and the new
    decisions are recorded as new events; history keeps the old ones. Stops at an LLM outage."""
    return await _call(request, lambda m: m.reprocess(agent_id, message_id))


@router.get(
    "/{agent_id}/entities",
    response_model=Page[EntityItem],
    responses=_ERRORS,
    summary="List an agent's entities",
)
async def list_entities(
    request: Request,
    agent_id: AgentId,
    page: Annotated[EntityQuery, Query()],
    _grant: ReadGrant,
) -> Any:
    fields, tree = metadata_query.split(page)
    return await _call(request, lambda m: m.list_entities(agent_id, **fields, metadata=tree))


@router.get(
    "/{agent_id}/messages",
    response_model=Page[MessageItem],
    responses=_ERRORS,
    summary="List an agent's recorded messages (hidden ones marked)",
)
async def list_messages(
    request: Request,
    agent_id: AgentId,
    flt: Annotated[MessageQuery, Query()],
    _grant: ReadGrant,
) -> Any:
    fields, tree = metadata_query.split(flt)
    return await _call(request, lambda m: m.list_messages(agent_id, **fields, metadata=tree))
