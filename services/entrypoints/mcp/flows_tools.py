"""The MCP tool for memory that flows in from outside (ADR-0049): ``add_facts``, facts the
agent decided itself. Registered by ``build_server`` beside ``write``; it borrows the server's
key check, blocking-call runner and memory lookup (passed in, so no import cycle), waits for
its decisions to be visible like ``write`` does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from engramdb.domain.agent_id import AGENT_ID_PATTERN
from engramdb.infra.api_keys import KeyRing
from engramdb.services.write.models import WriteResult


class FactIn(BaseModel):
    """A fact as the agent states it (the tool's input schema)."""

    model_config = ConfigDict(extra="forbid")

    subject: str = Field(min_length=1, max_length=200, description="who or what it is about, e.g. the user's name")
    text: str = Field(min_length=1, max_length=2000, description="the statement, e.g. 'Ana lives in Porto'")
    sources: list[str] = Field(default_factory=list, max_length=16,
                               description="message ids of earlier `write` calls it rests on")
    valid_from: datetime | None = Field(default=None, description="when it became true (default: now)")
    valid_to: datetime | None = Field(default=None, description="when it stopped being true (past only)")
    attribute_key: str | None = Field(default=None, max_length=60,
                                      description="single-valued attribute such as 'residence': replaces the old value")
    metadata: dict[str, Any] = Field(default_factory=dict)


def add_flow_tools(
    server: MCPServer[Any],
    keyring: KeyRing | None,
    wait_timeout: float,
    *,
    check: Callable[[Context[Any], KeyRing | None, str, str | None], Any],
    call: Callable[[Callable[[], Any]], Awaitable[Any]],
    memory_of: Callable[[Context[Any]], Any],
) -> None:
    @server.tool(
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=False),
        description="Remember facts you decided yourself, without extraction (the exact "
        "statements to keep). A known fact is confirmed; a new value of an attribute_key "
        "replaces the old one; anything else is added.",
    )
    async def add_facts(
        agent_id: Annotated[str, Field(pattern=AGENT_ID_PATTERN, max_length=200,
                                       description="whose memory (the same on every call)")],
        facts: Annotated[list[FactIn], Field(min_length=1, max_length=100)],
        ctx: Context[Any],
    ) -> WriteResult:
        """Remember facts you decided yourself, without extraction: use it when you already
        know the exact statement to keep (and `write` with infer=false for the turn itself).
        Memory reconciles them like extracted facts: a known fact is confirmed (NOOP), a new
        value of an attribute_key replaces the old one (UPDATE), anything else is added."""
        check(ctx, keyring, "write", agent_id)
        m = memory_of(ctx)

        def run() -> WriteResult:
            result: WriteResult = m.add_facts(
                agent_id, [f.model_dump(exclude_none=True) for f in facts], via="mcp")
            m.wait_for_projections(result.position, timeout=wait_timeout, agent_id=agent_id)
            return result

        result: WriteResult = await call(run)
        return result
