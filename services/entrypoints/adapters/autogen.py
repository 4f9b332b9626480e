"""AutoGen adapter (``pip install 'engramdb[autogen]'``): engramdb as an
``autogen_core.memory.Memory``, the protocol AutoGen agents (``AssistantAgent(memory=[...])``)
call before each model call.

``update_context`` retrieves for the latest user message and adds what memory knows as one
``SystemMessage`` (the protocol's own convention, as ``ListMemory`` does); ``query`` returns
the facts as ``MemoryContent`` with their score and provenance; ``add`` writes a turn (the
pipeline decides which facts it holds); ``clear`` forgets the agent (an event: history keeps
it, ADR-0016). ``close`` leaves the ``AsyncMemory`` open: the caller owns it.
"""

from __future__ import annotations

import contextlib
from typing import Any

from autogen_core import CancellationToken
from autogen_core.memory import (
    Memory,
    MemoryContent,
    MemoryMimeType,
    MemoryQueryResult,
    UpdateContextResult,
)
from autogen_core.model_context import ChatCompletionContext
from autogen_core.models import SystemMessage, UserMessage

from engramdb.services.entrypoints.adapters.shared import fact_metadata, recalled_text
from engramdb.services.management.models import NotFoundError
from engramdb.services.memory.async_facade import AsyncMemory


class EngramdbMemory(Memory):
    """``agent_id``'s engramdb memory for an AutoGen agent; ``speaker`` names who speaks in
    the content ``add`` stores (the user's name, so facts say whose they are)."""

    def __init__(self, memory: AsyncMemory, agent_id: str, *, speaker: str | None = None,
                 top_k: int = 5) -> None:
        self.memory = memory
        self.agent_id = agent_id
        self.speaker = speaker
        self.top_k = top_k

    async def update_context(self, model_context: ChatCompletionContext) -> UpdateContextResult:
        messages = await model_context.get_messages()
        asked = next((m.content for m in reversed(messages)
                      if isinstance(m, UserMessage) and isinstance(m.content, str)), None)
        if not asked:
            return UpdateContextResult(memories=MemoryQueryResult(results=[]))
        result = await self.memory.retrieve(self.agent_id, asked)
        found = self._contents(result)
        if found:
            await model_context.add_message(SystemMessage(
                content="Relevant memory content:\n" + recalled_text(result, self.top_k)))
        return UpdateContextResult(memories=MemoryQueryResult(results=found))

    async def query(self, query: str | MemoryContent,
                    cancellation_token: CancellationToken | None = None,
                    **kwargs: Any) -> MemoryQueryResult:
        text = query if isinstance(query, str) else str(query.content)
        return MemoryQueryResult(results=self._contents(
            await self.memory.retrieve(self.agent_id, text)))

    async def add(self, content: MemoryContent,
                  cancellation_token: CancellationToken | None = None) -> None:
        if not isinstance(content.content, str):
            raise ValueError("engramdb stores text: MemoryContent.content must be a string")
        metadata = dict(content.metadata or {})
        speaker = metadata.pop("speaker", None) or self.speaker
        await self.memory.write(self.agent_id, content.content, speaker=speaker,
                                metadata=metadata or None)

    async def clear(self) -> None:
        with contextlib.suppress(NotFoundError):  # nothing stored yet
            await self.memory.forget_agent(self.agent_id, via="autogen")

    async def close(self) -> None:
        return None

    def _contents(self, result: Any) -> list[MemoryContent]:
        return [MemoryContent(content=f.fact_text, mime_type=MemoryMimeType.TEXT,
                              metadata=fact_metadata(f)) for f in result.facts[: self.top_k]]
