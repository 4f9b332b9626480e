"""HTTP routes for memory that flows in from outside (ADR-0049): ``POST /v1/facts``, facts
the client decided. A refused fact is a 422 whose ``loc`` names it (``body.facts.1.sources``):
a client must be able to point at the fact, never read a 500.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Depends, Request

from engramdb.infra.api_keys import Grant
from engramdb.services.entrypoints.http.auth import authorize, require
from engramdb.services.entrypoints.http.errors import AUTH_ERRORS, ErrorBody, plain, unprocessable
from engramdb.services.write.client_facts import AddFactsRequest, InvalidClientFacts
from engramdb.services.write.models import WriteResult

router = APIRouter()


def _loc(field: str) -> list[str | int]:
    """``facts[1].sources`` -> ``["body", "facts", 1, "sources"]``."""
    parts: list[str | int] = ["body"]
    for name, index in re.findall(r"([A-Za-z_]+)|\[(\d+)\]", field):
        parts.append(int(index) if index else name)
    return parts


@router.post(
    "/v1/facts",
    response_model=WriteResult,
    responses={422: {"model": ErrorBody}, **AUTH_ERRORS},
    summary="Record facts the client decided (no extraction), reconciled ADD / UPDATE / NOOP",
)
async def add_facts(
    request: AddFactsRequest, http: Request, grant: Annotated[Grant, Depends(require("write"))],
) -> Any:
    authorize(grant, "write", request.agent_id)
    memory = http.app.state.memory
    try:
        result = await anyio.to_thread.run_sync(
            lambda: memory.add_facts(request.agent_id, request, via="http"))
    except InvalidClientFacts as exc:
        return unprocessable(_loc(exc.field), exc.reason)
    return plain(result)
