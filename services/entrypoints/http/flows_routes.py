"""HTTP routes for memory that flows in and out (ADR-0049): ``POST /v1/facts``, facts the
client decided; ``/v1/webhooks`` (admin keys), where changes are delivered. A refused fact is a 422 whose ``loc`` names it (``body.facts.1.sources``):
a client must be able to point at the fact, never read a 500.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Body, Depends, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from engramdb.infra.api_keys import Grant
from engramdb.services.entrypoints.http.auth import authorize, require
from engramdb.services.entrypoints.http.errors import AUTH_ERRORS, ErrorBody, plain, unprocessable
from engramdb.services.entrypoints.http.openapi_examples import FACTS_EXAMPLES, WEBHOOK_EXAMPLES
from engramdb.services.management.webhooks import Webhook, WebhookRefused
from engramdb.services.write.client_facts import AddFactsRequest, InvalidClientFacts
from engramdb.services.write.models import WriteResult

router = APIRouter(tags=["flows"])


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
    request: Annotated[AddFactsRequest, Body(openapi_examples=FACTS_EXAMPLES)], http: Request, grant: Annotated[Grant, Depends(require("write"))],
) -> Any:
    authorize(grant, "write", request.agent_id)
    memory = http.app.state.memory
    try:
        result = await anyio.to_thread.run_sync(
            lambda: memory.add_facts(request.agent_id, request, via="http"))
    except InvalidClientFacts as exc:
        return unprocessable(_loc(exc.field), exc.reason)
    return plain(result)


class WebhookIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(min_length=1, max_length=2000)
    agent_id: str | None = Field(default=None, max_length=200)
    agent_prefix: str | None = Field(default=None, max_length=200)
    secret: str | None = Field(default=None, min_length=16, max_length=200)
    max_attempts: int = Field(default=8, ge=1, le=50)


def _covers(grant: Grant, hook: Webhook | WebhookIn) -> bool:
    """Whether an admin key may see or manage a webhook: it covers the hook's agent, or
    every agent its prefix can name (issue 28's rule: a tenant's key stays in its tenant)."""
    if hook.agent_id is not None:
        return grant.allows("admin", hook.agent_id)
    prefix = hook.agent_prefix or ""
    return "admin" in grant.scopes and any(
        p == "*" or (p.endswith("*") and prefix.startswith(p[:-1])) for p in grant.agents
    )


@router.post("/v1/webhooks", response_model=Webhook, responses={422: {"model": ErrorBody}, **AUTH_ERRORS},
             summary="Register a URL for an agent's (or a prefix's) changes; the answer holds the secret")
async def add_webhook(body: Annotated[WebhookIn, Body(openapi_examples=WEBHOOK_EXAMPLES)], http: Request,
                      grant: Annotated[Grant, Depends(require("admin"))]) -> Any:
    if not _covers(grant, body):
        raise HTTPException(status_code=403, detail="this API key does not cover those agents")
    memory = http.app.state.memory
    try:
        hook = await anyio.to_thread.run_sync(lambda: memory.add_webhook(
            body.url, agent_id=body.agent_id, agent_prefix=body.agent_prefix, secret=body.secret,
            max_attempts=body.max_attempts))
    except WebhookRefused as exc:
        return unprocessable(["body", "url" if "url" in str(exc) else "agent_id"], str(exc))
    except ValueError as exc:
        return unprocessable(["body", "agent_id"], str(exc))
    return plain(hook)


@router.get("/v1/webhooks", response_model=list[Webhook], responses={**AUTH_ERRORS},
            summary="The registered webhooks (without their secrets)")
async def list_webhooks(http: Request, grant: Annotated[Grant, Depends(require("admin"))]) -> Any:
    hooks = await anyio.to_thread.run_sync(http.app.state.memory.list_webhooks)
    return plain([h for h in hooks if _covers(grant, h)])


@router.delete("/v1/webhooks/{webhook_id}", responses={404: {"description": "no such webhook"}, **AUTH_ERRORS},
               summary="Stop delivering to a webhook")
async def delete_webhook(webhook_id: str, http: Request,
                         grant: Annotated[Grant, Depends(require("admin"))]) -> Any:
    memory = http.app.state.memory
    hooks = await anyio.to_thread.run_sync(memory.list_webhooks)
    mine = any(h.webhook_id == webhook_id and _covers(grant, h) for h in hooks)
    if not mine or not await anyio.to_thread.run_sync(lambda: memory.delete_webhook(webhook_id)):
        raise HTTPException(status_code=404, detail=f"no webhook {webhook_id!r:.80}")
    return {"deleted": webhook_id}
