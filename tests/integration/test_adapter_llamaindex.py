"""The LlamaIndex adapter with the real ``llama-index-core`` on real PostgreSQL (issue 24,
ADR-0048): LlamaIndex's own ``Memory`` with ``EngramdbMemoryBlock`` — messages that overflow
its short-term history are flushed into engramdb (``_aput``), and ``aget`` renders what
engramdb knows for the latest question into the system message. The tokenizer is a word
split (no tokenizer download), the chat store LlamaIndex's default in-memory SQLite.
"""

from __future__ import annotations

from typing import Any

import pytest

li_memory = pytest.importorskip("llama_index.core.memory", reason="pip install -e '.[llamaindex]'")
from llama_index.core.base.llms.types import ChatMessage  # noqa: E402

from engramdb.infra.providers.scripted import HashEmbedder  # noqa: E402
from engramdb.services.entrypoints.adapters.llamaindex import EngramdbMemoryBlock  # noqa: E402
from engramdb.services.memory.async_facade import AsyncMemory  # noqa: E402
from engramdb.services.memory.facade import Memory  # noqa: E402


@pytest.fixture
def memory(fresh_schema: Any) -> Any:
    _schema, env = fresh_schema("llama")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield AsyncMemory(mem, owns_memory=False)


async def test_llamaindex_memory_flushes_into_engramdb_and_recalls(memory: AsyncMemory,
                                                                   agent_id: str) -> None:
    block = EngramdbMemoryBlock(memory=memory, agent_id=agent_id, speaker="Ana")
    chat = li_memory.Memory.from_defaults(
        session_id=agent_id, token_limit=40, chat_history_token_ratio=0.5, token_flush_size=10,
        memory_blocks=[block], tokenizer_fn=str.split)
    for text in ("I live in Recife.", "I love jazz and I play the piano every Sunday.",
                 "My sister Carla works at Acme in the city centre.", "Tell me a joke please."):
        await chat.aput(ChatMessage(role="user", content=text))
        await chat.aput(ChatMessage(role="assistant", content="Noted, thank you for telling me."))
    await memory.wait_for_projections()
    stored = (await memory.list_messages(agent_id)).items
    assert "I live in Recife." in [m.text for m in stored]  # flushed from short-term history
    assert all(m.speaker == "Ana" for m in stored)

    await chat.aput(ChatMessage(role="user", content="Where does Ana live?"))
    rendered = await chat.aget()
    system = rendered[0]
    assert system.role == "system" and "<engramdb>" in system.content
    assert "Ana lives in Recife" in system.content
    assert await block.aget([]) == ""  # no question, nothing recalled
