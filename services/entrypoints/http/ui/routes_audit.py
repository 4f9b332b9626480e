"""Inspector pages that answer "why": a fact's lineage (source turns → decision → every
version), time travel (memory as of an instant, and a diff of two instants) and a retrieve
with its trace. Lineage comes from the log (``Memory.history``, the read model only names
the versions to fetch); as-of and diff from the bi-temporal columns, a page at a time."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from engramdb.services.entrypoints.http.ui.calls import UIError, call, instant, may, need
from engramdb.services.entrypoints.http.ui.render import page
from engramdb.services.entrypoints.http.ui.routes_browse import Cursor, Text, erased_page

router = APIRouter(include_in_schema=False)
MAX_QUERY_CHARS = 2000


@router.get("/agents/{agent_id}/facts/{fact_id}", response_class=HTMLResponse)
async def lineage(request: Request, agent_id: str, fact_id: str) -> HTMLResponse:
    need(request, "read", agent_id)
    if (erased := await erased_page(request, agent_id)) is not None:
        return erased
    fact = await call(request, lambda m: m.get_fact(agent_id, fact_id))
    history = await call(request, lambda m: m.history(agent_id, fact_id))
    sources = [s.message_id for s in fact.sources]
    outputs = await call(request, lambda m: m.extraction_outputs(agent_id, sources, fact_id))
    return page(request, "lineage.html", title=f"Fact {fact_id}", agent_id=agent_id,
                tab="facts", fact=fact, history=history, llm_outputs=outputs,
                can_delete=fact.status == "active" and may(request, "write", agent_id))


@router.get("/agents/{agent_id}/time", response_class=HTMLResponse)
async def time_travel(
    request: Request, agent_id: str, at: Text = None, t1: Text = None, t2: Text = None,
    cursor: Cursor = None,
) -> HTMLResponse:
    need(request, "read", agent_id)
    if (erased := await erased_page(request, agent_id)) is not None:
        return erased
    timeline = await call(request, lambda m: m.agent_timeline(agent_id, 200))
    moment = instant(at, "at") or timeline.last
    facts: Any = None
    if moment is not None:
        facts = await call(request, lambda m: m.list_facts(
            agent_id, as_of=moment, limit=50, cursor=cursor))
    first, second = instant(t1, "t1"), instant(t2, "t2")
    diff = None
    if first is not None and second is not None:
        diff = await call(request, lambda m: m.facts_diff(agent_id, first, second, 200))
    elif (first is None) != (second is None):
        raise UIError(400, "a diff needs both t1 and t2")
    index = 0
    if moment is not None and timeline.instants:
        index = max((i for i, t in enumerate(timeline.instants) if t <= moment), default=0)
    return page(request, "time.html", title=f"{agent_id} as of", agent_id=agent_id,
                tab="time", timeline=timeline, moment=moment, index=index,
                facts=facts.items if facts else [], next_cursor=facts.next_cursor if facts else None,
                diff=diff, t1=t1 or "", t2=t2 or "")


@router.get("/agents/{agent_id}/retrieve", response_class=HTMLResponse)
async def retrieve(
    request: Request, agent_id: str,
    q: Annotated[str | None, Query(max_length=MAX_QUERY_CHARS)] = None,
    as_of: Text = None,
) -> HTMLResponse:
    need(request, "read", agent_id)
    if (erased := await erased_page(request, agent_id)) is not None:
        return erased
    moment = instant(as_of, "as_of")
    result = None
    if q and q.strip():
        result = await call(request, lambda m: m.retrieve(agent_id, q, as_of=moment))
    trace = dict(result.trace) if result else {}
    timings = trace.pop("timings_ms", {})
    candidates = trace.pop("candidates", {})
    return page(request, "retrieve.html", title=f"Retrieve for {agent_id}", agent_id=agent_id,
                tab="retrieve", q=q or "", as_of=as_of or "", result=result, timings=timings,
                candidates=candidates, notes=trace)
