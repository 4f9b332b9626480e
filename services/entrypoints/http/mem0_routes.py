"""The Mem0 platform's REST routes (issue 24, ADR-0047), so the official ``mem0ai`` client —
``MemoryClient(api_key=..., host="http://<engramdb serve>")`` — works unchanged.

Only the routes that client's memory verbs call are here (read from mem0ai 2.2's
``mem0/client/main.py``): ``GET /v1/ping/``, ``POST /v3/memories/add/``, ``POST /v3/memories/``
(get_all), ``POST /v3/memories/search/``, ``GET|PUT|DELETE /v1/memories/{id}/``,
``GET /v1/memories/{id}/history/``, ``DELETE /v1/memories/`` (delete_all). Each calls
``Mem0Memory`` (``services/memory/mem0_compat.py``) on a worker thread.

Auth: the client sends ``Authorization: Token <key>``; the key is an engramdb API key
(ADR-0011) and its agents/scopes apply to the memory the call lands in (``user:<id>``,
``agent:<id>``, ``run:<id>``), so a key for ``user:ana`` reads Ana's memory and nobody else's.
Errors: what Mem0 rejects gets Mem0's shape (``{"detail": "..."}`` with its status, which the
client turns into its own exceptions); valid Mem0 that engramdb does not do is engramdb's 422
naming the field; nothing is a 500.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Body, Depends, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from engramdb.infra.api_keys import Grant, KeyRing
from engramdb.services.entrypoints.http.auth import OPEN
from engramdb.services.entrypoints.http.errors import from_validation, plain, unprocessable
from engramdb.services.entrypoints.http.openapi_examples import (
    MEM0_ADD_EXAMPLES,
    MEM0_SEARCH_EXAMPLES,
)
from engramdb.services.management.models import NotFoundError
from engramdb.services.memory.mem0_compat import Mem0Memory
from engramdb.services.memory.mem0_shapes import (
    SCOPE_KEYS,
    Mem0Error,
    Scope,
    Unsupported,
    parse_mem0_id,
    split_filters,
)
from engramdb.services.retrieve.config import UnknownConfigKey
from engramdb.services.write.messages import MessageIdConflict

router = APIRouter(tags=["mem0"])

_ADD_IGNORED = {"version", "output_format", "async_mode"}  # how the server answers, not what
_SEARCH_IGNORED = {"version", "output_format", "rerank", "fields"}


async def mem0_grant(request: Request) -> Grant:
    """The API key in ``Authorization: Token <key>`` (Mem0's scheme) or ``Bearer <key>``."""
    ring: KeyRing | None = getattr(request.app.state, "keyring", None)
    if not ring:
        return OPEN
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() not in ("token", "bearer") or not key.strip():
        raise HTTPException(401, "missing API key: send 'Authorization: Token <key>'",
                            headers={"WWW-Authenticate": "Token"})
    grant = ring.find(key.strip())
    if grant is None:
        raise HTTPException(401, "Invalid API key", headers={"WWW-Authenticate": "Token"})
    return grant


GrantDep = Annotated[Grant, Depends(mem0_grant)]


def _allow(grant: Grant, scope: str, memory_key: str) -> None:
    if not grant.allows(scope, memory_key):
        raise HTTPException(403, f"this API key may not {scope} memory {memory_key!r}")


async def _run(request: Request, grant: Grant, fn: Callable[[Mem0Memory], Any]) -> Any:
    actor = None if grant is OPEN else f"key:{grant.key_id}"
    compat = Mem0Memory(request.app.state.memory, actor=actor)
    try:
        return plain(await anyio.to_thread.run_sync(lambda: fn(compat)))
    except Mem0Error as exc:
        return JSONResponse(status_code=exc.status, content={"detail": exc.message})
    except NotFoundError as exc:
        return JSONResponse(status_code=404, content={"detail": str(exc)})
    except Unsupported as exc:
        return unprocessable(["body", "filters"], str(exc), "unsupported")
    except UnknownConfigKey as exc:
        return unprocessable(["body"], str(exc), "extra_forbidden")
    except MessageIdConflict as exc:
        return JSONResponse(status_code=409, content={"detail": str(exc)})
    except ValidationError as exc:
        return from_validation(["body"], exc)
    except ValueError as exc:  # an engramdb rule (metadata, text limits, filter grammar)
        return unprocessable(["body"], str(exc))


def _body_dict(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise HTTPException(400, "the request body must be a JSON object")
    return body


def _scope_from(body: dict[str, Any]) -> Scope:
    """Scope ids at the top of a body, or in its ``filters`` (the v3 client puts them there,
    also inside a top-level ``AND``): the memory the call lands in, checked before it runs."""
    ids = {k: body[k] for k in SCOPE_KEYS if body.get(k) is not None}
    return split_filters(body.get("filters"), ids)[0]


def _scope_or_error(body: dict[str, Any], grant: Grant, scope: str) -> Scope | JSONResponse:
    try:
        found = _scope_from(body)
        _allow(grant, scope, found.memory_key)
        return found
    except Mem0Error as exc:
        return JSONResponse(status_code=exc.status, content={"detail": exc.message})
    except Unsupported as exc:
        return unprocessable(["body", "filters"], str(exc), "unsupported")


def _unknown(body: dict[str, Any], known: set[str], ignored: set[str]) -> JSONResponse | None:
    extra = sorted(set(body) - known - ignored)
    if extra:
        return unprocessable(["body", extra[0]], f"engramdb does not support {', '.join(extra)} "
                             f"(supported: {', '.join(sorted(known))})", "unsupported")
    return None


@router.get("/v1/ping/", summary="Mem0: check the API key")
async def ping(grant: GrantDep) -> Any:
    return {"status": "ok", "org_id": "engramdb", "project_id": "engramdb",
            "user_email": None, "key_id": grant.key_id}


@router.post("/v3/memories/add/", summary="Mem0: add messages (extract and decide, or record)")
async def add(request: Request, grant: GrantDep,
              body: Annotated[dict[str, Any], Body(openapi_examples=MEM0_ADD_EXAMPLES)]) -> Any:
    body = _body_dict(body)
    bad = _unknown(body, {"messages", "user_id", "agent_id", "run_id", "metadata", "infer",
                          "filters"}, _ADD_IGNORED)
    if bad is not None:
        return bad
    scope = _scope_or_error(body, grant, "write")
    if isinstance(scope, JSONResponse):
        return scope
    infer = body.get("infer", True)
    if not isinstance(infer, bool):
        return JSONResponse(status_code=400, content={"detail": "infer must be a boolean"})
    return await _run(request, grant, lambda m: m.add(
        body.get("messages") or "", **scope.fields(), metadata=body.get("metadata"), infer=infer))


@router.post("/v3/memories/", summary="Mem0: list memories (get_all), filtered in SQL")
async def get_all(
    request: Request, grant: GrantDep, body: Annotated[dict[str, Any] | None, Body()] = None,
    page: Annotated[int, Query(ge=1, le=10_000)] = 1,
    page_size: Annotated[int, Query(ge=1, le=500)] = 100,
) -> Any:
    body = _body_dict(body or {})
    bad = _unknown(body, {"filters", "user_id", "agent_id", "run_id"}, {"version", "output_format"})
    if bad is not None:
        return bad
    scope = _scope_or_error(body, grant, "read")
    if isinstance(scope, JSONResponse):
        return scope
    ids = {k: body[k] for k in ("user_id", "agent_id", "run_id") if body.get(k) is not None}
    want = page * page_size
    found = await _run(request, grant, lambda m: m.get_all(filters=body.get("filters"),
                                                           top_k=want + 1, **ids))
    if isinstance(found, JSONResponse):
        return found
    items = found["results"]
    return {"count": len(items[:want]) if len(items) <= want else None,
            "next": (str(request.url.include_query_params(page=page + 1)) if len(items) > want
                     else None),
            "previous": (str(request.url.include_query_params(page=page - 1)) if page > 1
                         else None),
            "results": items[(page - 1) * page_size: want]}


@router.post("/v3/memories/search/", summary="Mem0: search memories (engramdb's retrieve)")
async def search(request: Request, grant: GrantDep,
                 body: Annotated[dict[str, Any], Body(openapi_examples=MEM0_SEARCH_EXAMPLES)]) -> Any:
    body = _body_dict(body)
    bad = _unknown(body, {"query", "filters", "top_k", "threshold", "user_id", "agent_id",
                          "run_id"}, _SEARCH_IGNORED)
    if bad is not None:
        return bad
    scope = _scope_or_error(body, grant, "read")
    if isinstance(scope, JSONResponse):
        return scope
    ids = {k: body[k] for k in ("user_id", "agent_id", "run_id") if body.get(k) is not None}
    return await _run(request, grant, lambda m: m.search(
        body.get("query") or "", filters=body.get("filters"), top_k=body.get("top_k") or 10,
        threshold=body.get("threshold"), **ids))


def _memory_key(memory_id: str) -> str:
    try:
        return parse_mem0_id(memory_id)[1]
    except Mem0Error as exc:
        raise HTTPException(exc.status, exc.message) from None


@router.get("/v1/memories/{memory_id}/", summary="Mem0: one memory (its current version)")
async def get(memory_id: str, request: Request, grant: GrantDep) -> Any:
    _allow(grant, "read", _memory_key(memory_id))
    return await _run(request, grant, lambda m: m.get(memory_id))


@router.put("/v1/memories/{memory_id}/", summary="Mem0: rewrite a memory (a FactUpdated event)")
async def update(memory_id: str, request: Request, grant: GrantDep,
                 body: Annotated[dict[str, Any], Body()]) -> Any:
    body = _body_dict(body)
    bad = _unknown(body, {"text", "metadata"}, set())
    if bad is not None:
        return bad
    _allow(grant, "write", _memory_key(memory_id))
    return await _run(request, grant, lambda m: m.update(
        memory_id, text=body.get("text"), metadata=body.get("metadata")))


@router.delete("/v1/memories/{memory_id}/", summary="Mem0: delete a memory (a FactRetracted event)")
async def delete(memory_id: str, request: Request, grant: GrantDep,
                 delete_linked: Annotated[bool, Query()] = False) -> Any:
    _allow(grant, "write", _memory_key(memory_id))
    if delete_linked:
        return unprocessable(["query", "delete_linked"], "engramdb keeps superseded versions in "
                             "history; delete the current memory only", "unsupported")
    return await _run(request, grant, lambda m: m.delete(memory_id))


@router.get("/v1/memories/{memory_id}/history/", summary="Mem0: a memory's decisions")
async def history(memory_id: str, request: Request, grant: GrantDep) -> Any:
    _allow(grant, "read", _memory_key(memory_id))
    return await _run(request, grant, lambda m: m.history(memory_id))


@router.delete("/v1/memories/", summary="Mem0: delete all memories of a user, agent or run")
async def delete_all(
    request: Request, grant: GrantDep,
    user_id: Annotated[str | None, Query(max_length=200)] = None,
    agent_id: Annotated[str | None, Query(max_length=200)] = None,
    run_id: Annotated[str | None, Query(max_length=200)] = None,
) -> Any:
    try:
        scope = Scope.of({"user_id": user_id, "agent_id": agent_id, "run_id": run_id})
        _allow(grant, "write", scope.memory_key)
    except Mem0Error as exc:
        return JSONResponse(status_code=exc.status, content={"detail": exc.message})
    return await _run(request, grant, lambda m: m.delete_all(**scope.fields()))
