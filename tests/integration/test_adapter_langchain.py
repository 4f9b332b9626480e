"""The LangChain / LangGraph adapter with the real packages (``langchain-core``, ``langgraph``)
on real PostgreSQL (issue 24, ADR-0048): a compiled LangGraph graph whose first node recalls
through ``EngramdbRetriever`` and whose second stores the user's turn through the
``save_memory`` tool; the second run of the graph recalls what the first one stored. No LLM:
the graph's nodes are plain functions, which is what a LangGraph memory node is.
"""

from __future__ import annotations

from typing import Any, TypedDict

import pytest

pytest.importorskip("langchain_core", reason="pip install -e '.[langchain]'")
langgraph_graph = pytest.importorskip("langgraph.graph")

from engramdb.infra.providers.scripted import HashEmbedder  # noqa: E402
from engramdb.services.entrypoints.adapters.langchain import (  # noqa: E402
    EngramdbRetriever,
    memory_tools,
)
from engramdb.services.entrypoints.adapters.shared import NOTHING_RECALLED  # noqa: E402
from engramdb.services.memory.async_facade import AsyncMemory  # noqa: E402
from engramdb.services.memory.facade import Memory  # noqa: E402


class Turn(TypedDict, total=False):
    said: str
    recalled: list[str]
    stored: str


@pytest.fixture
def memory(fresh_schema: Any) -> Any:
    _schema, env = fresh_schema("lc")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield AsyncMemory(mem, owns_memory=False)


async def test_a_langgraph_graph_recalls_and_stores(memory: AsyncMemory, agent_id: str) -> None:
    retriever = EngramdbRetriever(memory=memory, agent_id=agent_id, top_k=3)
    recall_tool, save_tool = memory_tools(memory, agent_id, speaker="Ana")

    async def recall(state: Turn) -> Turn:
        docs = await retriever.ainvoke(state["said"])
        return {"recalled": [d.page_content for d in docs]}

    async def store(state: Turn) -> Turn:
        return {"stored": await save_tool.ainvoke({"text": state["said"]})}

    builder = langgraph_graph.StateGraph(Turn)
    builder.add_node("recall", recall)
    builder.add_node("store", store)
    builder.add_edge(langgraph_graph.START, "recall")
    builder.add_edge("recall", "store")
    builder.add_edge("store", langgraph_graph.END)
    graph = builder.compile()

    first = await graph.ainvoke({"said": "I live in Recife."})
    assert first["recalled"] == [] and first["stored"].startswith("Stored: ADD")
    await memory.wait_for_projections()
    second = await graph.ainvoke({"said": "Where do I live? Recife?"})
    assert any("Recife" in r for r in second["recalled"]), second

    docs = retriever.invoke("Where does Ana live?")  # the sync path too
    assert docs[0].page_content.startswith("Ana lives in Recife")
    assert docs[0].metadata["source_message_ids"] and docs[0].id == docs[0].metadata["fact_id"]
    assert "Ana lives in Recife" in await recall_tool.ainvoke({"query": "Where does Ana live?"})
    assert recall_tool.invoke({"query": "Where does Ana live?"}).count("Recife") >= 1


async def test_tools_say_nothing_recalled_for_an_empty_memory(memory: AsyncMemory, agent_id: str) -> None:
    recall_tool, _save = memory_tools(memory, agent_id)
    assert await recall_tool.ainvoke({"query": "anything?"}) == NOTHING_RECALLED
    assert {t.name for t in memory_tools(memory, agent_id)} == {"recall_memory", "save_memory"}
