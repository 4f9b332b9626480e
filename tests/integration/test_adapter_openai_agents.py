"""The OpenAI Agents SDK adapter with the real ``openai-agents`` package on real PostgreSQL
(issue 24, ADR-0048): ``Runner.run`` drives an ``Agent`` whose model is scripted (an
``agents.models.interface.Model`` that answers from a script, never the network; tracing off):
the first run calls ``save_memory``, the second calls ``recall_memory`` and answers with what
the tool returned — so the SDK really executes engramdb's tools and feeds their output back.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
agents = pytest.importorskip("agents", reason="pip install -e '.[openai-agents]'")
from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from engramdb.infra.providers.scripted import HashEmbedder  # noqa: E402
from engramdb.services.entrypoints.adapters.openai_agents import memory_tools  # noqa: E402
from engramdb.services.memory.async_facade import AsyncMemory  # noqa: E402
from engramdb.services.memory.facade import Memory  # noqa: E402


class ScriptedModel(Model):
    """Call ``tool`` with ``arguments`` first; once the tool's output is in the input, answer
    with it. Records every input it was given."""

    def __init__(self, tool: str, arguments: dict[str, Any]) -> None:
        self.tool, self.arguments = tool, arguments
        self.inputs: list[Any] = []

    async def get_response(self, system_instructions: Any, input: Any, model_settings: Any,
                           tools: Any, output_schema: Any, handoffs: Any, tracing: Any,
                           **_: Any) -> ModelResponse:
        self.inputs.append(input)
        outputs = [i for i in (input if isinstance(input, list) else [])
                   if isinstance(i, dict) and i.get("type") == "function_call_output"]
        if not outputs:
            call = ResponseFunctionToolCall(type="function_call", call_id="call-1",
                                            name=self.tool, arguments=json.dumps(self.arguments))
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(type="output_text", text=str(outputs[-1]["output"]),
                                  annotations=[])
        message = ResponseOutputMessage(id="msg-1", type="message", role="assistant",
                                        status="completed", content=[text])
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the test runs without streaming")


@pytest.fixture
def memory(fresh_schema: Any) -> Any:
    _schema, env = fresh_schema("oaiagents")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield AsyncMemory(mem, owns_memory=False)


async def test_an_agent_run_saves_then_recalls(memory: AsyncMemory, agent_id: str) -> None:
    tools = memory_tools(memory, agent_id, speaker="Ana")
    assert {t.name for t in tools} == {"recall_memory", "save_memory"}
    saver = ScriptedModel("save_memory", {"text": "I live in Recife."})
    agent = agents.Agent(name="assistant", instructions="Remember the user.", tools=tools,
                         model=saver)
    saved = await agents.Runner.run(agent, "I live in Recife.")
    assert saved.final_output.startswith("Stored: ADD"), saved.final_output
    await memory.wait_for_projections()

    recaller = ScriptedModel("recall_memory", {"query": "Where does Ana live?"})
    answered = await agents.Runner.run(agent.clone(model=recaller), "Where do I live?")
    assert "Ana lives in Recife" in answered.final_output, answered.final_output
    assert len(recaller.inputs) == 2  # the SDK ran the tool and gave its output back
