"""OpenAI Agents SDK adapter (``pip install 'engramdb[openai-agents]'``): engramdb as two
function tools an ``agents.Agent`` calls, ``recall_memory(query)`` and ``save_memory(text)``.

Tools rather than a ``Session``: an SDK session is the run's verbatim item history (every
input and output item, replayed into the next call); engramdb is long-term memory that decides
facts from turns and answers queries — what a tool call is for. Writing the history as turns
is still possible (``save_memory``), but returning engramdb's facts as "the session's items"
would not be what a session promises (ADR-0048).
"""

from __future__ import annotations

from agents import FunctionTool, function_tool

from engramdb.services.entrypoints.adapters.shared import recalled_text, written_text
from engramdb.services.memory.async_facade import AsyncMemory


def memory_tools(
    memory: AsyncMemory, agent_id: str, *, speaker: str | None = None, top_k: int = 5
) -> list[FunctionTool]:
    """``recall_memory`` and ``save_memory`` for ``agent_id`` (``speaker``: whose words
    ``save_memory`` stores, e.g. the user's name)."""

    @function_tool
    async def recall_memory(query: str) -> str:
        """Look up what long-term memory knows that is relevant to a query.

        Args:
            query: what to look up, e.g. "Where does the user live?"
        """
        return recalled_text(await memory.retrieve(agent_id, query), top_k)

    @function_tool
    async def save_memory(text: str) -> str:
        """Store something the user said in long-term memory.

        Args:
            text: the user's words, first person, e.g. "I live in Recife."
        """
        return written_text(await memory.write(agent_id, text, speaker=speaker))

    return [recall_memory, save_memory]
