"""The AutoGen adapter with the real ``autogen-core`` on real PostgreSQL (issue 24,
ADR-0048): ``EngramdbMemory`` through the ``autogen_core.memory.Memory`` protocol — ``add``,
then ``update_context`` on AutoGen's own ``UnboundedChatCompletionContext`` (what an agent calls
before its model call) puts what memory knows into the context as a system message; ``query``
and ``clear``.
"""

from __future__ import annotations

from typing import Any

import pytest

autogen_memory = pytest.importorskip("autogen_core.memory", reason="pip install -e '.[autogen]'")
from autogen_core.model_context import UnboundedChatCompletionContext  # noqa: E402
from autogen_core.models import SystemMessage, UserMessage  # noqa: E402

from engramdb.infra.providers.scripted import HashEmbedder  # noqa: E402
from engramdb.services.entrypoints.adapters.autogen import EngramdbMemory  # noqa: E402
from engramdb.services.memory.async_facade import AsyncMemory  # noqa: E402
from engramdb.services.memory.facade import Memory  # noqa: E402


@pytest.fixture
def memory(fresh_schema: Any) -> Any:
    _schema, env = fresh_schema("autogen")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield AsyncMemory(mem, owns_memory=False)


async def test_engramdb_is_an_autogen_memory(memory: AsyncMemory, agent_id: str) -> None:
    mem = EngramdbMemory(memory, agent_id, speaker="Ana")
    assert isinstance(mem, autogen_memory.Memory)
    text = autogen_memory.MemoryMimeType.TEXT
    await mem.add(autogen_memory.MemoryContent(content="I live in Recife.", mime_type=text,
                                               metadata={"channel": "chat"}))
    await mem.add(autogen_memory.MemoryContent(content="I love jazz.", mime_type=text))
    await memory.wait_for_projections()

    context = UnboundedChatCompletionContext()
    await context.add_message(UserMessage(content="Where does Ana live?", source="user"))
    updated = await mem.update_context(context)
    assert updated.memories.results[0].content.startswith("Ana lives in Recife")
    messages = await context.get_messages()
    assert isinstance(messages[-1], SystemMessage) and "Ana lives in Recife" in messages[-1].content

    found = await mem.query("jazz")
    assert any("jazz" in str(r.content) for r in found.results)
    assert found.results[0].metadata and found.results[0].metadata["source_message_ids"]

    await mem.clear()  # a Forgotten event: nothing recalled afterwards, history keeps it
    await memory.wait_for_projections()
    assert (await mem.query("Where does Ana live?")).results == []
    assert any(e.decision == "FORGET" for e in await memory.history(agent_id))
    await mem.close()


async def test_an_autogen_assistant_agent_answers_with_engramdb_memory(
    memory: AsyncMemory, agent_id: str
) -> None:
    """A real ``AssistantAgent`` run (autogen-agentchat) with a scripted model client
    (autogen-ext's ``ReplayChatCompletionClient``): the model is called with the memory's
    system message, and the run reports the memory it used (``MemoryQueryEvent``)."""
    agentchat = pytest.importorskip("autogen_agentchat.agents")
    replay = pytest.importorskip("autogen_ext.models.replay")
    events = pytest.importorskip("autogen_agentchat.messages")

    class Recording(replay.ReplayChatCompletionClient):  # type: ignore[misc, name-defined]
        seen: list[Any] = []

        async def create(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            Recording.seen.append(list(messages))
            return await super().create(messages, *args, **kwargs)

    await memory.write(agent_id, "I live in Recife.", speaker="Ana")
    await memory.wait_for_projections()
    agent = agentchat.AssistantAgent(
        "assistant", model_client=Recording(["You live in Recife."]),
        memory=[EngramdbMemory(memory, agent_id, speaker="Ana")])
    result = await agent.run(task="Where does Ana live?")
    assert result.messages[-1].content == "You live in Recife."
    used = [m for m in result.messages if isinstance(m, events.MemoryQueryEvent)]
    assert used and used[0].content[0].content.startswith("Ana lives in Recife")
    sent = Recording.seen[0]
    assert any(isinstance(m, SystemMessage) and "Ana lives in Recife" in m.content for m in sent)
