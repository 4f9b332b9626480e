"""The MCP tool list a model pays for in every session stays small and plain (issue 27,
ADR-0050).

Why a test: the six tools' definitions were 22 KB (raw docstring indentation, reST, a long
``agent_id`` description repeated in each); ADR-0050 cut them to 13.4 KB, and a tool added
later (``add_facts``, ADR-0049) brought back a multi-line indented docstring as its
description. Built in process (no memory is opened: the lifespan never runs), so the budget is
checked on every unit run.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from engramdb.services.entrypoints.mcp.server import build_server
from engramdb.services.entrypoints.mcp.strict import Pin

# measured 17.6 KB unpinned / 16.4 KB pinned with seven tools (2026-12-03); a little headroom
BUDGET_BYTES = 18_500


def _tools(pin: Pin | None) -> list[dict[str, Any]]:
    server = build_server(open_memory=lambda: None, pin=pin)
    tools = asyncio.run(server.list_tools())
    return [t.model_dump(mode="json", exclude_none=True, by_alias=True) for t in tools]


def _descriptions(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["description"]] if isinstance(node.get("description"), str) else []
        return own + [d for value in node.values() for d in _descriptions(value)]
    if isinstance(node, list):
        return [d for item in node for d in _descriptions(item)]
    return []


def test_tool_list_is_within_budget_pinned_or_not() -> None:
    for pin in (None, Pin.parse("ana"), Pin.parse("team-a:*")):
        size = len(json.dumps(_tools(pin)))
        assert size <= BUDGET_BYTES, f"{pin}: tool list is {size / 1000:.1f} KB"


def test_every_description_is_one_plain_line() -> None:
    tools = _tools(None)
    for tool in tools:
        assert len(tool["description"]) <= 300, tool["name"]
        for text in _descriptions(tool):
            assert "\n" not in text and "``" not in text and "  " not in text, (tool["name"], text)
    agent_ids = {t["inputSchema"]["properties"]["agent_id"]["description"] for t in tools}
    assert len(agent_ids) == 1 and len(next(iter(agent_ids))) <= 60, agent_ids
