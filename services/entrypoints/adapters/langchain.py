"""LangChain / LangGraph adapter (``pip install 'engramdb[langchain]'``): a retriever and two
tools over ``AsyncMemory``.

- ``EngramdbRetriever``: a ``BaseRetriever`` whose documents are the facts engramdb's retrieve
  ranks for the query (``page_content`` = the fact, ``metadata`` = id, score, entity, source
  turns); sync and async (``invoke`` / ``ainvoke``). Drops into any RAG chain or a LangGraph
  node.
- ``memory_tools``: ``recall_memory(query)`` and ``save_memory(text)`` as ``StructuredTool``s,
  for an agent that decides itself when to remember.

Not a LangGraph ``BaseStore``: a store is a key-value document store (the caller chooses
namespace and key, ``put`` overwrites, ``get`` returns what was put). engramdb decides its own
facts from what was said — a ``put`` would have no honest ``get`` (ADR-0048).
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import ConfigDict

from engramdb.services.entrypoints.adapters.shared import fact_metadata, recalled_text, written_text
from engramdb.services.memory.async_facade import AsyncMemory
from engramdb.services.retrieve.models import RetrieveResult


def _documents(result: RetrieveResult, top_k: int) -> list[Document]:
    return [Document(page_content=f.fact_text, metadata=fact_metadata(f), id=f.fact_id)
            for f in result.facts[:top_k]]


class EngramdbRetriever(BaseRetriever):
    """The facts about ``query`` in ``agent_id``'s memory, best first."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: AsyncMemory
    agent_id: str
    top_k: int = 5

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        return _documents(self.memory.sync.retrieve(self.agent_id, query), self.top_k)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        return _documents(await self.memory.retrieve(self.agent_id, query), self.top_k)


def memory_tools(
    memory: AsyncMemory, agent_id: str, *, speaker: str | None = None, top_k: int = 5
) -> list[BaseTool]:
    """``recall_memory`` and ``save_memory`` for ``agent_id`` (``speaker``: who is speaking
    in what the agent saves, e.g. the user's name, so facts say whose they are)."""

    async def recall(query: str) -> str:
        return recalled_text(await memory.retrieve(agent_id, query), top_k)

    def recall_sync(query: str) -> str:
        return recalled_text(memory.sync.retrieve(agent_id, query), top_k)

    async def save(text: str) -> str:
        return written_text(await memory.write(agent_id, text, speaker=speaker))

    def save_sync(text: str) -> str:
        return written_text(memory.sync.write(agent_id, text, speaker=speaker))

    described: list[tuple[str, str, Any, Any]] = [
        ("recall_memory", "Look up what long-term memory knows that is relevant to a query.",
         recall_sync, recall),
        ("save_memory", "Store something the user said in long-term memory (first person as "
         "the user said it).", save_sync, save),
    ]
    return [StructuredTool.from_function(func=f, coroutine=c, name=n, description=d)
            for n, d, f, c in described]
