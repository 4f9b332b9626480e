"""LlamaIndex adapter (``pip install 'engramdb[llamaindex]'``): engramdb as a memory block of
LlamaIndex's ``Memory`` (``llama_index.core.memory``), beside its short-term chat history.

``_aget`` retrieves for the latest user message and returns the prompt-ready context (what
LlamaIndex renders inside ``<memory><engramdb>…``); ``_aput`` receives the messages that
overflow the short-term history and writes the user's ones as turns — the write pipeline
decides the facts, as for any turn. Nothing is returned when memory knows nothing relevant.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.memory import BaseMemoryBlock
from pydantic import ConfigDict, Field

from engramdb.services.entrypoints.adapters.shared import NOTHING_RECALLED, recalled_text
from engramdb.services.memory.async_facade import AsyncMemory


class EngramdbMemoryBlock(BaseMemoryBlock[str]):
    """``agent_id``'s long-term memory as a LlamaIndex memory block."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str = Field(default="engramdb", description="the block's name in the prompt")
    description: str | None = "Long-term memory: facts learnt from earlier conversations."
    memory: AsyncMemory
    agent_id: str
    speaker: str | None = Field(default=None, description="whose words the user messages are")
    top_k: int = 5

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        asked = next((m.content for m in reversed(messages or [])
                      if m.role == MessageRole.USER and isinstance(m.content, str) and m.content),
                     None)
        if not asked:
            return ""
        text = recalled_text(await self.memory.retrieve(self.agent_id, asked), self.top_k)
        return "" if text == NOTHING_RECALLED else text

    async def _aput(self, messages: list[ChatMessage]) -> None:
        for message in messages:
            if message.role == MessageRole.USER and isinstance(message.content, str) \
                    and message.content.strip():
                await self.memory.write(self.agent_id, message.content, speaker=self.speaker)
