"""The MCP server's gate on arguments: unknown ones refused, and the agent pinned (ADR-0050).

Why a subclass of the SDK's ``MCPServer`` and not a check inside each tool: the SDK's argument
model ignores names it does not know, so ``retrieve {"top_k": 1}`` succeeded and
``write {"metadata": ...}`` dropped the metadata without a word — the model believed it had
been heard. The check belongs before validation, in the one place every call passes.

Why pinning: over stdio there are no API keys, and the model chooses ``agent_id`` on every
call, so a prompt-injected model could read or delete any agent's memory. ``engramdb mcp
--agent A`` pins the server: the tools then have no ``agent_id`` at all (the server fills it
in) and no call can name another agent. ``--agent 'team-a:*'`` pins it to a prefix: the tools
keep ``agent_id``, and an id outside the prefix is a tool error the model can read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, InputRequiredResult

from engramdb.domain.agent_id import check_agent_id
from engramdb.infra.api_keys import agent_matches

AGENT_ARG = "agent_id"


@dataclass(frozen=True)
class Pin:
    """Which agents a server may reach: ``"*"`` (all, the default), one exact id, or a
    ``prefix*``."""

    pattern: str = "*"

    @classmethod
    def parse(cls, pattern: str | None) -> Pin:
        """``None``/``"*"``: unpinned. Anything else must be a valid agent id, optionally with
        one trailing ``*`` (a ``ValueError`` with one readable line otherwise)."""
        if pattern is None or pattern == "*":
            return cls()
        stem = pattern[:-1] if pattern.endswith("*") else pattern
        if not stem or "*" in stem:
            raise ValueError(f"--agent {pattern!r}: give an agent id, or a prefix ending in '*'")
        if not pattern.endswith("*"):
            check_agent_id(stem)
        return cls(pattern)

    @property
    def exact(self) -> str | None:
        """The one agent of an exact pin (its tools take no ``agent_id``), else ``None``."""
        return None if self.pattern.endswith("*") else self.pattern

    def admit(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments the tool receives: the pinned agent filled in, or the caller's agent
        checked against the prefix."""
        if self.exact is not None:
            return {**arguments, AGENT_ARG: self.exact}
        agent = arguments.get(AGENT_ARG)
        if self.pattern != "*" and isinstance(agent, str) and not agent_matches(self.pattern, agent):
            raise ToolError(
                f"this memory server serves only agents {self.pattern!r}; {agent!r} is not one of them"
            )
        return arguments


class StrictServer(MCPServer[Any]):
    """``MCPServer`` whose tools refuse arguments they do not declare, and which reaches only
    the agents its ``Pin`` admits."""

    def __init__(self, *args: Any, pin: Pin = Pin(), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pin = pin

    def seal_schemas(self) -> None:
        """After the tools are added: ``additionalProperties: false`` on every input schema
        (so the model is told, not only refused), and ``agent_id`` gone from them under an
        exact pin."""
        for tool in self._tool_manager.list_tools():
            schema = tool.parameters
            schema["additionalProperties"] = False
            _strip_titles(schema)
            _plain_descriptions(schema, models=True)
            if tool.output_schema is not None:
                _strip_titles(tool.output_schema)
                _plain_descriptions(tool.output_schema, models=False)
            if self.pin.exact is not None:
                schema.get("properties", {}).pop(AGENT_ARG, None)
                required = [name for name in schema.get("required", []) if name != AGENT_ARG]
                if required:
                    schema["required"] = required
                else:
                    schema.pop("required", None)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            declared = set(tool.parameters.get("properties", {}))
            unknown = sorted(set(arguments) - declared)
            if unknown:
                raise ToolError(_unknown_message(name, unknown, declared, self.pin))
            arguments = self.pin.admit(arguments)
        return await super().call_tool(name, arguments, context)


def _strip_titles(schema: Any) -> None:
    """Drop pydantic's generated ``title`` keys (``"Agent Id"`` beside ``agent_id``): they
    repeat the property names and a model pays for them in every session's tool list."""
    if isinstance(schema, dict):
        if isinstance(schema.get("title"), str):
            del schema["title"]
        for key, value in schema.items():
            if key in ("properties", "$defs"):
                for sub in value.values():
                    _strip_titles(sub)
            else:
                _strip_titles(value)
    elif isinstance(schema, list):
        for item in schema:
            _strip_titles(item)


def _plain_descriptions(schema: Any, *, models: bool) -> None:
    """Descriptions a model reads as one plain line: whitespace collapsed and reST's double
    backticks made single. ``models=False`` (output schemas) drops a model's own description
    (its class docstring, written for developers: ``HistoryEntry``'s was three lines of reST)
    and keeps the fields'; a model pays for every byte in each session's tool list."""
    if isinstance(schema, dict):
        text = schema.get("description")
        if isinstance(text, str):
            if not models and "properties" in schema:
                del schema["description"]
            else:
                schema["description"] = " ".join(text.replace("``", "`").split())
        for key, value in schema.items():
            if key in ("properties", "$defs"):
                for sub in value.values():
                    _plain_descriptions(sub, models=models)
            else:
                _plain_descriptions(value, models=models)
    elif isinstance(schema, list):
        for item in schema:
            _plain_descriptions(item, models=models)


def _unknown_message(tool: str, unknown: list[str], declared: set[str], pin: Pin) -> str:
    """One line the model can act on: what it sent that does not exist, and what does."""
    if AGENT_ARG in unknown and pin.exact is not None:
        return (
            f"{tool}: this memory server is pinned to one agent; leave out 'agent_id' "
            f"(it takes: {', '.join(sorted(declared)) or 'no arguments'})"
        )
    return (
        f"{tool}: unknown argument(s) {', '.join(repr(u) for u in unknown)}; "
        f"it takes: {', '.join(sorted(declared)) or 'no arguments'}"
    )
