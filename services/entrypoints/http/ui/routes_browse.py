"""Inspector pages for looking around: the agent list, an agent's facts (filtered), its
entities and graph, its conversation by session, its patterns and profiles. Every list is one
page of a keyset-paginated facade query (never a whole agent)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from engramdb.services.entrypoints.http.metadata_query import parse_filter
from engramdb.services.entrypoints.http.ui.calls import UIError, call, instant, may, need
from engramdb.services.entrypoints.http.ui.graph_svg import layout
from engramdb.services.entrypoints.http.ui.render import page

router = APIRouter(include_in_schema=False)
Text = Annotated[str | None, Query(max_length=500)]
Cursor = Annotated[str | None, Query(max_length=2000)]
STATUSES = ("active", "superseded", "retracted", "forgotten", "all")


@router.get("/")
async def home() -> RedirectResponse:
    return RedirectResponse("/ui/agents", status_code=303)


@router.get("/agents", response_class=HTMLResponse)
async def agents(request: Request, q: Text = None, cursor: Cursor = None) -> HTMLResponse:
    grant = need(request, "read")
    covered = list(grant.agents)  # filtered in SQL: a tenant's page is full (ADR-0051)
    found = await call(request, lambda m: m.agent_overviews(
        search=q or None, limit=50, cursor=cursor, agents=covered))
    items = list(found.items)
    erased = None  # an erased agent has no rows left: only an exact id finds its marker
    if q and cursor is None and grant.allows("read", q) and q not in {a.agent_id for a in items}:
        try:
            erased = await call(request, lambda m: m.erasure_of(q))
        except UIError:
            erased = None  # not a valid agent id: nothing to look up
    return page(request, "agents.html", title="Agents", agents=items, q=q or "",
                next_cursor=found.next_cursor, erased=erased)


async def erased_page(request: Request, agent_id: str) -> HTMLResponse | None:
    marker = await call(request, lambda m: m.erasure_of(agent_id))
    if marker is None:
        return None
    return page(request, "erased.html", status=410, title=f"Agent {agent_id}",
                agent_id=agent_id, marker=marker)


@router.get("/agents/{agent_id}", response_class=HTMLResponse)
async def agent_facts(
    request: Request,
    agent_id: str,
    entity: Text = None,
    session: Text = None,
    speaker: Text = None,
    status: Text = None,
    text: Text = None,
    valid_at: Text = None,
    metadata: Cursor = None,
    cursor: Cursor = None,
) -> HTMLResponse:
    need(request, "read", agent_id)
    if (erased := await erased_page(request, agent_id)) is not None:
        return erased
    if status and status not in STATUSES:
        raise UIError(400, f"status must be one of {', '.join(STATUSES)}")
    valid = instant(valid_at, "valid_at")
    try:  # the source turns' metadata, the tree every list takes (issue 24)
        tree = parse_filter(metadata) if metadata else None
    except ValueError as exc:
        raise UIError(400, f"metadata: {exc}") from None
    facts = await call(request, lambda m: m.list_facts(
        agent_id, status=status or None, entity=entity or None,  # type: ignore[arg-type]
        session=session or None, speaker=speaker or None, valid_at=valid, text=text or None,
        limit=50, cursor=cursor, metadata=tree,
    ))
    overview = await call(request, lambda m: m.agent_overview(agent_id))
    filters = {"entity": entity or "", "session": session or "", "speaker": speaker or "",
               "status": status or "", "text": text or "", "valid_at": valid_at or "",
               "metadata": metadata or ""}
    return page(request, "agent_facts.html", title=f"Agent {agent_id}", agent_id=agent_id,
                tab="facts", facts=facts.items, next_cursor=facts.next_cursor, overview=overview,
                filters=filters, statuses=STATUSES, can_forget=may(request, "admin", agent_id))


@router.get("/agents/{agent_id}/entities", response_class=HTMLResponse)
async def agent_entities(
    request: Request, agent_id: str, center: Text = None, cursor: Cursor = None
) -> HTMLResponse:
    need(request, "read", agent_id)
    if (erased := await erased_page(request, agent_id)) is not None:
        return erased
    entities = await call(request, lambda m: m.list_entities(agent_id, limit=50, cursor=cursor))
    graph = await call(request, lambda m: m.entity_graph(agent_id, center or None, 60))
    return page(request, "agent_entities.html", title=f"Entities of {agent_id}",
                agent_id=agent_id, tab="entities", entities=entities.items,
                next_cursor=entities.next_cursor, graph=graph, drawing=layout(graph),
                center=center or "")


@router.get("/agents/{agent_id}/conversation", response_class=HTMLResponse)
async def agent_conversation(
    request: Request, agent_id: str, session: Text = None, speaker: Text = None,
    cursor: Cursor = None,
) -> HTMLResponse:
    need(request, "read", agent_id)
    if (erased := await erased_page(request, agent_id)) is not None:
        return erased
    sessions = await call(request, lambda m: m.list_sessions(agent_id, 100))
    messages = await call(request, lambda m: m.list_messages(
        agent_id, session=session or None, speaker=speaker or None, limit=50, cursor=cursor))
    return page(request, "agent_conversation.html", title=f"Conversation of {agent_id}",
                agent_id=agent_id, tab="conversation", sessions=sessions,
                messages=messages.items, next_cursor=messages.next_cursor,
                session=session or "", speaker=speaker or "", paged=cursor is not None)


@router.get("/agents/{agent_id}/patterns", response_class=HTMLResponse)
async def agent_patterns(request: Request, agent_id: str, cursor: Cursor = None) -> HTMLResponse:
    need(request, "read", agent_id)
    if (erased := await erased_page(request, agent_id)) is not None:
        return erased
    patterns = await call(request, lambda m: m.list_patterns(agent_id, 50))
    entities = await call(request, lambda m: m.list_entities(agent_id, limit=50, cursor=cursor))
    profiles = [e for e in entities.items if e.profile]
    return page(request, "agent_patterns.html", title=f"Patterns of {agent_id}",
                agent_id=agent_id, tab="patterns", patterns=patterns, profiles=profiles,
                next_cursor=entities.next_cursor)
