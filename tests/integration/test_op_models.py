"""A model per operation (issue 25 part 5, ADR-0052), end to end on real PostgreSQL.

Two OpenAI-compatible endpoints (``tests/support/fake_openai_server``: real HTTP, real
``openai`` client) configured through ``Settings`` the way a deployment sets
``ENGRAMDB_LLM_*`` and ``ENGRAMDB_LLM_RERANK_*`` / ``_PROFILES_*``: each operation must reach
its own endpoint with its own model, and the provenance must name that model. Entity
resolution is checked with scripted providers passed per operation (``llms=``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from test_write_pipeline import extraction_json, fact, message_key

from engramdb.domain.jobs import agent_jobs_id
from engramdb.infra.providers.scripted import HashEmbedder, ScriptedLLM
from engramdb.infra.settings import Settings
from engramdb.services.jobs import BY_NAME, JobContext
from engramdb.services.jobs.runner import run_pass
from engramdb.services.memory.facade import Memory
from tests.support.fake_openai_server import run_fake_openai

TEXT = "I moved to Recife last year."
EXTRACTION = extraction_json(fact("Ana lives in Recife", entity="Ana"), entities=[("Ana", "person")])


def _chats(server: Any) -> list[dict[str, Any]]:
    return [r["body"] for r in server.requests if r["path"].endswith("/chat/completions")]


def _user(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


def test_each_operation_calls_its_own_endpoint_and_model(fresh_schema: Any, agent_id: str) -> None:
    def small(body: dict[str, Any]) -> Any:  # the cheap endpoint: extraction only
        assert TEXT in _user(body), "only extraction may reach the extraction endpoint"
        return EXTRACTION

    def big(body: dict[str, Any]) -> Any:  # the other endpoint: rerank and profiles
        if "Ana lives in Recife" in _user(body) and "Where" in _user(body):
            return {"scores": {"1": 0.9}}
        return "Ana lives in Recife."

    _, env = fresh_schema("opmodels")
    with run_fake_openai(small) as cheap, run_fake_openai(big) as other:
        settings = Settings(
            llm_base_url=cheap, llm_api_key="global-key", llm_model="extract-small",
            llm_max_retries=0,
            llm_rerank_base_url=other, llm_rerank_model="rerank-big",
            llm_profiles_base_url=other, llm_profiles_model="profile-mid",
            llm_profiles_api_key="profiles-key",
        )
        with Memory.open(settings, env=env, embedder=HashEmbedder(384), quiet=True) as memory:
            assert memory.llms.distinct() == 3  # extraction = resolution = consolidation share one
            assert memory.llms.get("resolution") is memory.llms.get("extraction")
            written = memory.write(agent_id, TEXT, speaker="Ana")
            assert [d.kind for d in written.decisions if d.kind == "ADD"] == ["ADD"]
            result = memory.retrieve(agent_id, "Where does Ana live?", wait_for=written.position,
                                     config_overrides={"enable_reranker": True})
            assert result.trace["reranker"]["status"] == "ok"
            assert result.trace["reranker"]["model"] == "openai:rerank-big"
            run = run_pass(JobContext(memory), [BY_NAME["profiles"]], [agent_id])[0]
            assert run.status == "ok" and run.events >= 1, run

            # the provenance of the fact names the extraction model
            [entry] = [h for h in memory.history(agent_id) if h.decision == "ADD"]
            assert entry.decided_by["model"] == "openai:extract-small"
            assert entry.decided_by["extractor"] == "llm"
            assert "resolution_model" not in entry.decided_by  # no name was ambiguous
            profiles = [e for e in memory.app.events.get(agent_jobs_id(agent_id))
                        if type(e).__name__ == "ProfileRefreshed"]
            assert [p.model for p in profiles] == ["openai:profile-mid"]

        assert {b["model"] for b in _chats(cheap)} == {"extract-small"}
        assert len(_chats(cheap)) == 1
        assert sorted(b["model"] for b in _chats(other)) == ["profile-mid", "rerank-big"]
        # a key belongs to its endpoint: the global key never went to the other host
        keys = {r["headers"].get("authorization") for r in other.requests}
        assert "Bearer global-key" not in keys
        assert "Bearer profiles-key" in keys
        assert {r["headers"].get("authorization") for r in cheap.requests} == {"Bearer global-key"}


def test_resolution_model_is_in_the_provenance(fresh_schema: Any, agent_id: str) -> None:
    """``llms={...}``: scripted providers per operation; the decisions of a message whose name
    the resolver's model settled carry ``decided_by.resolution_model``."""
    extraction = ScriptedLLM({
        "My sister Carolina is a nurse.": extraction_json(
            fact("Carolina is a nurse", entity="Carolina"), entities=[("Carolina", "person")]),
        "Carolyn called me today.": extraction_json(
            fact("Carolyn called Ana", entity="Carolyn"), entities=[("Carolyn", "person")]),
    }, name="scripted-extractor", key_fn=message_key)

    def resolve(messages: Sequence[dict[str, Any]]) -> str:
        assert "Carolyn" in messages[-1]["content"]
        return json.dumps({"match": "person:carolina"})

    resolver = ScriptedLLM(resolve, name="scripted-resolver")
    _, env = fresh_schema("opmodels_res")
    with Memory.open(env=env, embedder=HashEmbedder(384), quiet=True,
                     llm=extraction, llms={"resolution": resolver}) as memory:
        assert memory.llm is not None and memory.llm.name == "scripted-extractor"
        seed = memory.write(agent_id, "My sister Carolina is a nurse.", speaker="Ana")
        assert seed.decisions
        written = memory.write(agent_id, "Carolyn called me today.", speaker="Ana")
        assert len(resolver.calls) == 1
        assert ("ALIAS", "person:carolina") in [(d.kind, d.entity_key) for d in written.decisions]
        added = [h for h in memory.history(agent_id) if h.decision == "ADD"]
        by_text = {h.text: h.decided_by for h in added}
        assert by_text["Carolyn called Ana"]["resolution_model"] == "scripted-resolver"
        assert by_text["Carolyn called Ana"]["model"] == "scripted-extractor"
        assert "resolution_model" not in by_text["Carolina is a nurse"]
        record = memory.app.message_record(agent_id, written.message_id)
        assert record is not None
        processed = list(memory.app.events.get(record.id))[-1]
        assert processed.extractor["resolution_model"] == "scripted-resolver"
