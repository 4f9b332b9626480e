"""Operations and actions: health and projection lags, pending extractions (reprocess),
job runs, erasure markers; and the state-changing actions — delete a fact, forget an agent,
erase an agent, reprocess — each behind a confirmation page and a CSRF-checked POST, through
the same facade methods (so the same events and audit) as ``/v1``, with the same scopes:
delete needs write, forget/erase/reprocess need admin (ADR-0011)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from engramdb.infra.api_keys import Grant
from engramdb.infra.settings import load_settings
from engramdb.services.entrypoints.http.ui.calls import UIError, actor, call, form, may, need
from engramdb.services.entrypoints.http.ui.render import page, seg

router = APIRouter(include_in_schema=False)


def _everyone(grant: Grant) -> bool:
    """Whether the key covers every agent (``*``, or the open loopback mode)."""
    return "*" in grant.agents


@router.get("/ops", response_class=HTMLResponse)
async def operations(request: Request) -> HTMLResponse:
    """Deployment-wide health for any admin; the rows that name agents (pending extractions,
    job runs, dead letters) only for the key's agents (issue 28: a tenant's admin must not see
    another tenant). Erasure markers and letters without an agent id cannot be attributed, so
    only a key for every agent sees them. Rows are filtered from the newest 100 (50 letters):
    a tenant's list may be shorter than its share."""
    grant = need(request, "admin")
    memory = request.app.state.memory
    health: Any = None
    if getattr(memory, "health", None) is not None:
        try:
            health = (await call(request, lambda m: m.health())).model_dump(mode="json")
        except Exception as exc:  # noqa: BLE001 - an unhealthy store is what this page shows
            health = {"error": str(exc)}
    pending = await call(request, lambda m: m.pending_extractions(limit=100))
    runs = await call(request, lambda m: m.job_runs(100))
    markers = await call(request, lambda m: m.erasure_markers(100))
    letters: Any = None
    letters_error = ""
    if hasattr(memory, "dead_letters"):
        try:
            letters = await call(request, lambda m: m.dead_letters(subject_prefix(request), 50))
        except Exception as exc:  # noqa: BLE001 - NATS down is what this page must show
            letters_error = f"{type(exc).__name__}: {exc}"
    if not _everyone(grant):
        pending = [p for p in pending if grant.allows("admin", p.agent_id)]
        runs = [r for r in runs if grant.allows("admin", r.agent_id)]
        markers = []
        if letters is not None:
            letters = [d for d in letters if d.agent_id and grant.allows("admin", d.agent_id)]
    return page(request, "ops.html", title="Operations", health=health, pending=pending,
                runs=runs, markers=markers, letters=letters, letters_error=letters_error)


@lru_cache(maxsize=1)
def _configured_prefix() -> str:
    return load_settings().subject_prefix


def subject_prefix(request: Request) -> str:
    """The NATS subject prefix: the app's (``engramdb ui`` sets it), else the settings'."""
    given: str | None = getattr(request.app.state, "subject_prefix", None)
    return given or _configured_prefix()


def _confirm(request: Request, agent_id: str, action: str, **context: Any) -> HTMLResponse:
    return page(request, "confirm.html", title=f"Confirm: {action}", agent_id=agent_id,
                action=action, **context)


@router.get("/agents/{agent_id}/facts/{fact_id}/delete", response_class=HTMLResponse)
async def confirm_delete(request: Request, agent_id: str, fact_id: str) -> HTMLResponse:
    need(request, "write", agent_id)
    fact = await call(request, lambda m: m.get_fact(agent_id, fact_id))
    return _confirm(request, agent_id, "delete", fact=fact,
                    target=f"/ui/agents/{seg(agent_id)}/facts/{seg(fact_id)}/delete")


@router.post("/agents/{agent_id}/facts/{fact_id}/delete")
async def delete(request: Request, agent_id: str, fact_id: str) -> RedirectResponse:
    grant = need(request, "write", agent_id)
    await form(request)
    result = await call(request, lambda m: m.delete_fact(agent_id, fact_id, actor=actor(grant), via="ui"))
    await call(request, lambda m: m.wait_for_projections(result.position, agent_id=agent_id))
    return RedirectResponse(f"/ui/agents/{seg(agent_id)}/facts/{seg(fact_id)}", status_code=303)


@router.get("/agents/{agent_id}/forget", response_class=HTMLResponse)
async def confirm_forget(request: Request, agent_id: str) -> HTMLResponse:
    need(request, "admin", agent_id)
    return _confirm(request, agent_id, "forget", target=f"/ui/agents/{seg(agent_id)}/forget")


@router.post("/agents/{agent_id}/forget")
async def forget(request: Request, agent_id: str) -> RedirectResponse:
    grant = need(request, "admin", agent_id)
    await form(request)
    result = await call(request, lambda m: m.forget_agent(agent_id, actor=actor(grant), via="ui"))
    await call(request, lambda m: m.wait_for_projections(result.position, agent_id=agent_id))
    return RedirectResponse(f"/ui/agents/{seg(agent_id)}?status=all", status_code=303)


@router.get("/agents/{agent_id}/erase", response_class=HTMLResponse)
async def confirm_erase(request: Request, agent_id: str) -> HTMLResponse:
    need(request, "admin", agent_id)
    return _confirm(request, agent_id, "erase", target=f"/ui/agents/{seg(agent_id)}/erase")


@router.post("/agents/{agent_id}/erase")
async def erase(request: Request, agent_id: str) -> RedirectResponse:
    grant = need(request, "admin", agent_id)
    fields = await form(request)
    if fields.get("confirm_agent") != agent_id:
        raise UIError(400, "type the agent id exactly to confirm erasing it")
    result = await call(request, lambda m: m.erase_agent(agent_id, actor=actor(grant), via="ui"))
    if result.position:
        await call(request, lambda m: m.wait_for_projections(result.position, agent_id=agent_id))
    return RedirectResponse(f"/ui/agents/{seg(agent_id)}", status_code=303)


@router.get("/agents/{agent_id}/reprocess", response_class=HTMLResponse)
async def confirm_reprocess(request: Request, agent_id: str) -> HTMLResponse:
    need(request, "admin", agent_id)
    pending = await call(request, lambda m: m.pending_extractions(agent_id, 100))
    return _confirm(request, agent_id, "reprocess", pending=pending,
                    target=f"/ui/agents/{seg(agent_id)}/reprocess")


@router.post("/agents/{agent_id}/reprocess", response_class=HTMLResponse)
async def reprocess(request: Request, agent_id: str) -> HTMLResponse:
    need(request, "admin", agent_id)
    await form(request)
    report = await call(request, lambda m: m.reprocess_pending(agent_id))
    return page(request, "reprocessed.html", title="Reprocessed", agent_id=agent_id,
                report=report, can_admin=may(request, "admin"))
