"""``engramdb mcp``: the memory as Model Context Protocol tools (official ``mcp`` SDK).

Six tools, named and shaped like the ``Memory`` methods they call (``write``, ``retrieve``,
``list_facts``, ``get_fact``, ``delete_fact``, ``history``), so an agent, the Python API,
HTTP and the CLI all speak of the same things. The tools' docstrings are what the agent's
model reads to decide when to call them: they say *when*, not only *what*.

Why the ``Memory`` is opened in the server's lifespan and not before: on stdio the SDK
diverts fd 1 to stderr while it serves, so anything the embedded PostgreSQL/NATS children or
the offline-extractor notice write cannot corrupt the protocol stream. On streamable HTTP the
caller opens it first (so an unreachable database fails before the port opens) and passes it
in. Who may call which tool over HTTP is ``services/entrypoints/mcp/transport.py`` (ADR-0017).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from engramdb.domain.agent_id import AGENT_ID_PATTERN, AGENT_ID_RULE
from engramdb.infra.api_keys import Grant, KeyRing
from engramdb.services.entrypoints.http.auth import OPEN
from engramdb.services.entrypoints.mcp.flows_tools import add_flow_tools
from engramdb.services.entrypoints.mcp.shapes import Recall, recall
from engramdb.services.entrypoints.mcp.strict import Pin, StrictServer
from engramdb.services.entrypoints.user_errors import one_line
from engramdb.services.management.audit_models import HistoryEntry
from engramdb.services.management.models import (
    DeleteResult,
    FactDetail,
    FactItem,
    FactStatus,
    Page,
)
from engramdb.services.write.models import WriteResult

INSTRUCTIONS = (
    "engramdb is long-term memory for this agent. Call `retrieve` before answering anything "
    "that may depend on what the user said in earlier conversations; call `write` with each "
    "user turn worth remembering (facts are extracted from it). Use `list_facts`/`get_fact` to "
    "inspect memory, `delete_fact` when the user asks to forget something, and `history` to "
    "explain how a memory came to be."
)
_SAME_AGENT = " Every tool takes the same `agent_id` ({rule})."
_PINNED = " This server holds the memory of one agent: no tool takes an `agent_id`."

AgentId = Annotated[
    str,
    Field(pattern=AGENT_ID_PATTERN, max_length=200, description="whose memory (the same on every call)"),
]
FactId = Annotated[
    str, Field(min_length=1, max_length=200, description="a fact id from retrieve or list_facts")
]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("engramdb")
    except PackageNotFoundError:
        return "0+unknown"


def _check(ctx: Context[Any], ring: KeyRing | None, scope: str, agent_id: str | None) -> Grant:
    """The caller's grant: open without keys (stdio, keyless loopback HTTP); else the bearer
    key's grant, which must hold ``scope`` for ``agent_id`` (ADR-0011's rules)."""
    if not ring:
        return OPEN
    headers = ctx.headers or {}
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    grant = ring.find(token.strip()) if scheme.lower() == "bearer" else None
    if grant is None:
        raise ToolError("missing or unknown API key: send 'Authorization: Bearer <key>'")
    if not grant.allows(scope, agent_id):
        raise ToolError(f"this API key may not {scope} agent {agent_id!r}")
    return grant


async def _call(fn: Callable[[], Any]) -> Any:
    """Run a blocking ``Memory`` call on a worker thread; a user's mistake becomes a tool
    error with one readable line (the agent sees it and can correct its call)."""
    try:
        return await anyio.to_thread.run_sync(fn)
    except (ValueError, LookupError) as exc:
        raise ToolError(one_line(exc)) from None


def _lifespan(memory: Any | None, open_memory: Callable[[], Any] | None) -> Any:
    """The server's lifespan: yields ``memory`` as is, or opens ``open_memory()`` for the
    server's life (on stdio, after the SDK has diverted fd 1; see the module docstring)."""

    @asynccontextmanager
    async def lifespan(_server: MCPServer[Any]) -> AsyncIterator[Any]:
        if memory is not None:
            yield memory
            return
        assert open_memory is not None
        opened = await anyio.to_thread.run_sync(open_memory)
        try:
            yield opened
        finally:
            await anyio.to_thread.run_sync(opened.close)

    return lifespan


def _memory(ctx: Context[Any]) -> Any:
    """The ``Memory`` the lifespan yielded."""
    return ctx.request_context.lifespan_context


def _add_write_tools(server: MCPServer[Any], keyring: KeyRing | None, wait_timeout: float) -> None:
    """``write`` and ``delete_fact``: each waits until its change is visible to the read
    tools, so an agent that writes then retrieves sees what it wrote."""

    @server.tool(
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=False),
        description="Remember one conversation turn (call it with each user message worth "
        "keeping: who they are, preferences, plans, corrections). Memory extracts the facts and "
        "decides ADD/UPDATE/DELETE/NOOP itself; they are retrievable when it returns.",
    )
    async def write(
        agent_id: AgentId,
        text: Annotated[str, Field(min_length=1, max_length=32000, description="the turn's text")],
        ctx: Context[Any],
        speaker: Annotated[str | None, Field(max_length=200, description="who said it, e.g. the user's name")] = None,
        session_id: Annotated[str | None, Field(max_length=200, description="conversation id")] = None,
        message_id: Annotated[
            str | None, Field(max_length=200, description="your id for the turn; repeating it is a no-op")
        ] = None,
        dry_run: Annotated[bool, Field(description="show the decisions, save nothing")] = False,
        infer: Annotated[
            bool, Field(description="false: store the turn only, extract nothing (use add_facts)")
        ] = True,
        metadata: Annotated[dict[str, Any] | None, Field(
            description='tags of the turn, e.g. {"channel": "slack"}; retrieve and list_facts filter by them')] = None,
    ) -> WriteResult:
        """Remember one conversation turn. Call it with each user message that may hold
        something worth keeping (who they are, preferences, plans, corrections such as "I
        moved to Porto"). Memory extracts facts and decides ADD / UPDATE / DELETE / NOOP
        itself; the result lists those decisions. Facts are retrievable when it returns."""
        _check(ctx, keyring, "write", agent_id)
        m = _memory(ctx)

        def run() -> WriteResult:
            result: WriteResult = m.write(
                agent_id, text, speaker=speaker, session_id=session_id, message_id=message_id,
                dry_run=dry_run, infer=infer, metadata=metadata,
            )
            if not dry_run:
                m.wait_for_projections(result.position, timeout=wait_timeout, agent_id=agent_id)
            return result

        result: WriteResult = await _call(run)
        return result

    @server.tool(
        annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=False),
        description="Delete a fact when the user asks to forget it or says it is wrong (a "
        "retraction: it stops being retrieved; `history` still shows it).",
    )
    async def delete_fact(
        agent_id: AgentId,
        fact_id: FactId,
        ctx: Context[Any],
        actor: Annotated[
            str | None, Field(max_length=200, description="who asked (default: mcp, or the API key)")
        ] = None,
    ) -> DeleteResult:
        """Delete a fact when the user asks to forget it or says it is wrong. Recorded as a
        retraction by the user: the fact stops being retrieved, and `history` still shows
        it was known and when it was deleted."""
        grant = _check(ctx, keyring, "write", agent_id)
        who = actor if actor is not None or grant is OPEN else f"key:{grant.key_id}"
        m = _memory(ctx)

        def run() -> DeleteResult:
            result: DeleteResult = m.delete_fact(agent_id, fact_id, actor=who, via="mcp")
            m.wait_for_projections(result.position, timeout=wait_timeout, agent_id=agent_id)
            return result

        result: DeleteResult = await _call(run)
        return result


def _add_retrieve_tool(server: MCPServer[Any], keyring: KeyRing | None) -> None:
    """``retrieve``: the tool a model calls most, registered apart from the listing tools."""

    @server.tool(
        annotations=ToolAnnotations(read_only_hint=True),
        description="Recall what memory knows for a question; call it before answering "
        "anything that may depend on earlier conversations. `context` is prompt-ready; `facts` "
        "give the ids for get_fact, delete_fact and history.",
    )
    async def retrieve(
        agent_id: AgentId,
        query: Annotated[str, Field(min_length=1, max_length=4000, description="what you need to know")],
        ctx: Context[Any],
        as_of: Annotated[
            datetime | None, Field(description="ISO time: answer from memory as it was then")
        ] = None,
        detail: Annotated[bool, Field(description="also scores, plan and ranked turns")] = False,
        session_id: Annotated[str | None, Field(
            max_length=200, description="only this conversation's turns and the facts drawn from them")] = None,
        metadata: Annotated[dict[str, Any] | None, Field(
            description='only turns whose metadata matches, e.g. {"channel": "slack"} (and facts from them)')] = None,
    ) -> Recall:
        """Recall what memory knows that matters for a question. Call it before answering
        anything that may depend on earlier conversations. `context` is a prompt-ready text
        (known facts, then relevant past turns); `facts` are the scored facts with their ids
        (for get_fact, delete_fact and history)."""
        _check(ctx, keyring, "read", agent_id)
        m = _memory(ctx)
        result = await _call(lambda: m.retrieve(agent_id, query, as_of=as_of, session_id=session_id,
                                                metadata=metadata))
        return recall(result, detail=detail)


def _add_read_tools(server: MCPServer[Any], keyring: KeyRing | None) -> None:
    """``retrieve``, ``list_facts``, ``get_fact`` and ``history``: read-only."""
    _add_retrieve_tool(server, keyring)

    @server.tool(
        annotations=ToolAnnotations(read_only_hint=True),
        description="List remembered facts (active by default), a page at a time: to show "
        "the user what is remembered or find a fact's id. To answer a question use retrieve.",
    )
    async def list_facts(
        agent_id: AgentId,
        ctx: Context[Any],
        status: Annotated[
            FactStatus | None, Field(description="default active; 'all' for every status")
        ] = None,
        entity: Annotated[str | None, Field(max_length=200, description="entity key or name")] = None,
        text: Annotated[str | None, Field(max_length=500, description="text the fact contains")] = None,
        limit: Annotated[int, Field(ge=1, le=500, description="facts per page")] = 50,
        cursor: Annotated[
            str | None, Field(max_length=2000, description="next_cursor of the previous page")
        ] = None,
        category: Annotated[str | None, Field(
            max_length=40, description="'directive': how the user asked you to behave (ADR-0045)"
        )] = None,
        metadata: Annotated[dict[str, Any] | None, Field(
            description='only facts from turns whose metadata matches, e.g. {"channel": "slack"}')] = None,
    ) -> Page[FactItem]:
        """List the facts memory holds for the agent (active ones by default), a page at a
        time. Use it to show the user what is remembered, or to find a fact's id; use
        `retrieve` instead to answer a question."""
        _check(ctx, keyring, "read", agent_id)
        m = _memory(ctx)
        page: Page[FactItem] = await _call(
            lambda: m.list_facts(
                agent_id, status=status, entity=entity, text=text, limit=limit, cursor=cursor,
                category=category, metadata=metadata,
            )
        )
        return page

    @server.tool(
        annotations=ToolAnnotations(read_only_hint=True),
        description="One fact (any status) with the conversation turns it rests on.",
    )
    async def get_fact(agent_id: AgentId, fact_id: FactId, ctx: Context[Any]) -> FactDetail:
        """One fact (whatever its status) with its provenance: the conversation turns it
        rests on. Use it to check where a remembered fact came from."""
        _check(ctx, keyring, "read", agent_id)
        m = _memory(ctx)
        detail: FactDetail = await _call(lambda: m.get_fact(agent_id, fact_id))
        return detail

    @server.tool(
        annotations=ToolAnnotations(read_only_hint=True),
        description="How a fact came to be: every decision on it, oldest first, with the "
        "message behind each. Use it when the user asks why memory believes something.",
    )
    async def history(agent_id: AgentId, fact_id: FactId, ctx: Context[Any]) -> list[HistoryEntry]:
        """How a fact came to be: every decision that touched it (added, confirmed,
        superseded, deleted), oldest first, with the message that caused each. Use it when
        the user asks why memory believes something or what it believed before."""
        _check(ctx, keyring, "read", agent_id)
        m = _memory(ctx)
        entries: list[HistoryEntry] = await _call(lambda: m.history(agent_id, fact_id))
        if not entries:
            raise ToolError(f"no history for fact {fact_id!r} of agent {agent_id!r}")
        return entries


def build_server(
    *,
    memory: Any | None = None,
    open_memory: Callable[[], Any] | None = None,
    keyring: KeyRing | None = None,
    wait_timeout: float = 30.0,
    pin: Pin | None = None,
) -> MCPServer[Any]:
    """The MCP server over ``memory`` (already open; not closed here) or over what
    ``open_memory()`` returns (opened in the lifespan, closed at its end). ``keyring``: the
    API keys tools check on streamable HTTP (``None``/empty: no checks). ``pin``: the agents
    the server may reach (``engramdb mcp --agent``; default all)."""
    if (memory is None) == (open_memory is None):
        raise ValueError("pass exactly one of memory= or open_memory=")
    pin = pin or Pin()
    rule = "" if pin.pattern == "*" else f"ids starting {pin.pattern[:-1]!r}"
    instructions = INSTRUCTIONS + (_PINNED if pin.exact else _SAME_AGENT.format(rule=rule or AGENT_ID_RULE))
    server = StrictServer(
        "engramdb", instructions=instructions, lifespan=_lifespan(memory, open_memory),
        log_level="WARNING", version=_version(), pin=pin,
    )
    _add_write_tools(server, keyring, wait_timeout)
    add_flow_tools(server, keyring, wait_timeout, check=_check, call=_call, memory_of=_memory)
    _add_read_tools(server, keyring)
    server.seal_schemas()
    return server
