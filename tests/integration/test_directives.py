"""Procedural directives and message emotion end to end (issue 26, ADR-0045), on the real
PostgreSQL (and NATS for the NATS surface): both extractors, the context's "Directives"
section, the lists of every surface, history and as-of, a correction superseding a directive,
the emotion on the message record and the retrieve filter on it.

The only doubles: the hashing embedder (honest, deterministic) and, for the LLM path, the
scripted LLM answering the JSON a model would give (the real-model run is in the benchmarks).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from faststream.nats import NatsBroker
from mcp import Client
from typer.testing import CliRunner

from engramdb.infra.providers.scripted import HashEmbedder, ScriptedLLM
from engramdb.services.entrypoints.cli.main import app as cli_app
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.entrypoints.mcp.server import build_server
from engramdb.services.entrypoints.nats.manage import register_manage, request_manage
from engramdb.services.extraction.llm_extractor import LLMExtractor
from engramdb.services.memory.facade import Memory
from tests.support.cli_env import point_cli_at

LOOSE = {"min_score": 0.0, "min_similarity": 0.0, "min_confidence": 0.0}


@pytest.fixture
def memory(fresh_schema: Any) -> Iterator[Memory]:
    _schema, env = fresh_schema("mind")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield mem


def _message_key(messages: Sequence[dict[str, Any]]) -> str:
    user = messages[-1]["content"]
    return user.split('Message:\n"""\n', 1)[1].rsplit('\n"""', 1)[0]


def _directive_ids(memory: Memory, agent: str, **kw: Any) -> list[str]:
    return [f.fact_id for f in memory.list_facts(agent, category="directive", **kw).items]


def test_offline_directive_in_context_lists_history_as_of_and_correction(memory: Memory, agent_id: str) -> None:
    memory.write(agent_id, "I live in Recife.", speaker="Ana")
    first = memory.write(agent_id, "From now on, keep your answers short.", speaker="Ana")
    memory.write(agent_id, "I work at Vertix and I love jazz.", speaker="Ana")
    memory.wait_for_projections()
    (added,) = [d for d in first.decisions if d.kind == "ADD"]
    (item,) = memory.list_facts(agent_id, category="directive").items
    assert (item.fact_id, item.text, item.category) == (added.fact_id, "From now on, keep your answers short.", "directive")
    assert item.attribute_key == "directive:answer_length"

    # every retrieve shows it, whatever the question, before the facts, and only once
    result = memory.retrieve(agent_id, "Where does Ana live?", config_overrides=LOOSE)
    assert [d.fact_id for d in result.directives] == [added.fact_id]
    assert result.context.startswith("Directives:\n- From now on, keep your answers short.")
    assert "Known facts:" in result.context and result.context.count("keep your answers short") == 1
    # never crowded out by facts: a tiny budget still holds it
    tiny = memory.retrieve(agent_id, "Recife Vertix jazz", config_overrides={**LOOSE, "context_max_tokens": 30})
    assert tiny.context.startswith("Directives:\n- From now on")

    time.sleep(0.05)
    between = datetime.now(UTC)
    time.sleep(0.05)
    fix = memory.write(agent_id, "Actually, long answers are fine.", speaker="Ana")
    memory.wait_for_projections(fix.position)
    (update,) = [d for d in fix.decisions if d.kind == "UPDATE"]
    assert update.target_fact_id == added.fact_id
    assert _directive_ids(memory, agent_id) == [update.fact_id]
    # the correction is also noted as one (ADR-0019's "actually…")
    assert [e.decision for e in memory.history(agent_id, update.fact_id)][:2] == ["ADD", "UPDATE"]
    assert _directive_ids(memory, agent_id, as_of=between) == [added.fact_id]
    then = memory.retrieve(agent_id, "anything", as_of=between, config_overrides=LOOSE)
    assert [d.text for d in then.directives] == ["From now on, keep your answers short."]
    now = memory.retrieve(agent_id, "anything", config_overrides=LOOSE)
    assert [d.text for d in now.directives] == ["Actually, long answers are fine."]
    assert {f.fact_id for f in memory.facts_as_of(agent_id, between)} >= {added.fact_id}

    # retractable like any fact
    memory.delete_fact(agent_id, update.fact_id)
    memory.wait_for_projections()
    assert _directive_ids(memory, agent_id) == []
    assert not memory.retrieve(agent_id, "anything").context.startswith("Directives:")


def test_offline_directives_pt_coexist_by_topic_and_a_new_one_supersedes(memory: Memory, agent_id: str) -> None:
    lang = memory.write(agent_id, "Sempre responda em português.", speaker="João")
    memory.write(agent_id, "Pare de me chamar de senhor.", speaker="João")
    memory.wait_for_projections()
    texts = {f.text for f in memory.list_facts(agent_id, category="directive").items}
    assert texts == {"Sempre responda em português.", "Pare de me chamar de senhor."}
    english = memory.write(agent_id, "A partir de agora, responda em inglês.", speaker="João")
    memory.wait_for_projections(english.position)
    (update,) = [d for d in english.decisions if d.kind == "UPDATE"]
    assert update.target_fact_id == next(d.fact_id for d in lang.decisions if d.kind == "ADD")
    result = memory.retrieve(agent_id, "o que eu gosto?")
    assert [d.topic for d in result.directives] == ["language", "form_of_address"]
    assert "- A partir de agora, responda em inglês." in result.context


def test_llm_path_directive_in_english_emotion_on_the_message_and_filter(fresh_schema: Any, agent_id: str) -> None:
    _schema, env = fresh_schema("mindllm")
    table = {
        "A partir de agora, responda sempre em português. Estou muito feliz hoje!": json.dumps({
            "emotion": {"primary": "joy", "intensity": "high"},
            "directives": [{"text": "Answer in Portuguese.", "topic": "language"}],
            "facts": [{"text": "Ana está muito feliz hoje", "entity": "Ana", "category": "personal"}],
            "entities": [{"name": "Ana", "entity_type": "person"}], "relationships": []}),
        "My dog died last week.": json.dumps({
            "emotion": {"primary": "sadness", "intensity": "high"}, "directives": [],
            "facts": [{"text": "Ana's dog died last week", "entity": "Ana", "category": "event"}],
            "entities": [{"name": "Ana", "entity_type": "person"}], "relationships": []}),
    }
    extractor = LLMExtractor(ScriptedLLM(table, key_fn=_message_key))
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, extractor=extractor, quiet=True) as memory:
        for mid, text in zip(("m1", "m2"), table, strict=True):
            memory.write(agent_id, text, speaker="Ana", message_id=mid)
        memory.wait_for_projections()
        (directive,) = memory.list_facts(agent_id, category="directive").items
        assert directive.text == "Answer in Portuguese." and directive.decided_by["extractor"] == "llm"
        messages = {m.message_id: m for m in memory.list_messages(agent_id).items}
        assert (messages["m1"].emotion, messages["m1"].emotion_intensity, messages["m1"].emotion_detector) == (
            "joy", pytest.approx(0.9), "llm")
        assert messages["m2"].emotion == "sadness"

        sad = memory.retrieve(agent_id, "dog feliz hoje", config_overrides={**LOOSE, "emotions": ["sadness"]})
        # m2's turn is said by its fact (a turn a shown fact says is not repeated); m1 is gone
        assert sad.facts and all(f.source_message_ids == ["m2"] for f in sad.facts)
        assert {e.message_id for e in sad.events} <= {"m2"}
        both = memory.retrieve(agent_id, "dog feliz hoje", config_overrides=LOOSE)
        assert {m for f in both.facts for m in f.source_message_ids} == {"m1", "m2"}
        none = memory.retrieve(agent_id, "dog feliz hoje", config_overrides={**LOOSE, "emotions": ["anger"]})
        assert none.events == [] and none.facts == []
        assert none.context.startswith("Directives:\n- Answer in Portuguese.")
        with pytest.raises(ValueError, match="emotions"):  # a clear 422 on HTTP (ADR-0012)
            memory.retrieve(agent_id, "x", config_overrides={"emotions": ["bored"]})


def test_offline_emotion_is_labelled_lexicon_or_absent(memory: Memory, agent_id: str) -> None:
    memory.write(agent_id, "I am so happy today!", speaker="Ana", message_id="m1")
    memory.write(agent_id, "I live in Recife.", speaker="Ana", message_id="m2")
    memory.wait_for_projections()
    rows = {m.message_id: (m.emotion, m.emotion_detector) for m in memory.list_messages(agent_id).items}
    assert rows == {"m1": ("joy", "lexicon"), "m2": (None, None)}


async def test_every_surface_lists_directives_and_emotion(memory: Memory, agent_id: str, nats_url: str) -> None:
    memory.write(agent_id, "Never suggest meetings before 9 am.", speaker="Ana", message_id="m1")
    memory.write(agent_id, "I am so excited about the trip!", speaker="Ana", message_id="m2")
    memory.wait_for_projections()
    want = ["Never suggest meetings before 9 am."]

    api = create_app(memory)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://t") as c:
        r = await c.get(f"/v1/agents/{agent_id}/facts", params={"category": "directive"})
        assert r.status_code == 200 and [f["text"] for f in r.json()["items"]] == want
        r = await c.get(f"/v1/agents/{agent_id}/facts", params={"category": ""})
        assert r.status_code == 422
        r = await c.get(f"/v1/agents/{agent_id}/messages")
        assert [m["emotion"] for m in r.json()["items"]] == [None, "joy"]
        r = await c.post("/v1/retrieve", json={"agent_id": agent_id, "query": "trip"})
        assert r.status_code == 200 and r.json()["context"].startswith("Directives:\n- Never suggest")

    prefix = f"engramdb.manage.test{uuid.uuid4().hex[:8]}"
    broker = NatsBroker(nats_url)
    register_manage(broker, memory, prefix=prefix)
    await broker.start()
    try:
        page = await request_manage(broker, "list_facts", {"agent_id": agent_id, "category": "directive"}, prefix=prefix)
        assert [f["text"] for f in page["result"]["items"]] == want
    finally:
        await broker.stop()

    async with Client(build_server(memory=memory), read_timeout_seconds=60) as client:
        result = await client.call_tool("list_facts", {"agent_id": agent_id, "category": "directive"})
        assert not result.is_error and [f["text"] for f in result.structured_content["items"]] == want


def test_cli_lists_directives(monkeypatch: pytest.MonkeyPatch, pg_url: str, fresh_schema: Any, agent_id: str) -> None:
    schema, _env = fresh_schema("mindcli")
    point_cli_at(monkeypatch, pg_url, schema)
    runner = CliRunner()
    assert runner.invoke(cli_app, ["write", "--agent", agent_id, "--speaker", "Ana", "Nunca use emojis."]).exit_code == 0
    assert runner.invoke(cli_app, ["write", "--agent", agent_id, "--speaker", "Ana", "Eu moro em Recife."]).exit_code == 0
    out = runner.invoke(cli_app, ["list-facts", "--agent", agent_id, "--category", "directive", "--json"])
    assert out.exit_code == 0, out.output
    assert [f["text"] for f in json.loads(out.stdout)["items"]] == ["Nunca use emojis."]
