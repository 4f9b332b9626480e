"""What the sleep-time jobs change in retrieve (ADR-0030): entity profiles in the context
("About <entity>"), the importance and pattern-evidence levers, and consolidation's periodic
detector. Real PostgreSQL from the fixtures; embedder ``HashEmbedder``; no LLM.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from engramdb.domain.aggregate import MessageRecord
from engramdb.domain.payloads import FactPayload
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.jobs import BY_NAME, JobContext
from engramdb.services.jobs.periodic import describe, regular
from engramdb.services.jobs.runner import run_pass
from engramdb.services.memory.facade import Memory

NOW = datetime.now(UTC)
OFF = {"enable_reranker": False}


@pytest.fixture
def memory(fresh_schema: Any) -> Iterator[Memory]:
    _, env = fresh_schema("jobs3")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield mem


def _fact(fid: str, text: str, messages: list[str] | None = None) -> FactPayload:
    msgs = messages or [f"m-{fid}"]
    return FactPayload(
        fact_id=fid, entity_key="person:ana", linked_entities=[], attribute_key=None, text=text,
        category="general", confidence=0.9, importance=0.5, source_message_id=msgs[0],
        source_message_ids=msgs, speaker="Ana", valid_from=NOW, decided_by={"by": "t"})


def _ana(memory: Memory, facts: list[tuple[str, str]]) -> str:
    agent = f"c-{uuid.uuid4().hex[:6]}"
    mem = memory.app.agent_memory(agent)
    mem.register_entity("person:ana", "Ana", "person", None, {"by": "t"})
    for fid, text in facts:
        mem.add_fact(_fact(fid, text))
    memory.app.save(mem)
    memory.wait_for_projections()
    return agent


def test_profiles_in_context_only_when_asked_within_the_budget(memory: Memory) -> None:
    agent = _ana(memory, [("f1", "Ana lives in Lisbon"), ("f2", "Ana works at Vertix as a nurse"),
                          ("f3", "Ana likes green tea")])
    assert run_pass(JobContext(memory), [BY_NAME["profiles"]], [agent])[0].events == 1
    memory.wait_for_projections()
    plain = memory.retrieve(agent, "Where does Ana work?", config_overrides=OFF)
    assert "About Ana" not in plain.context and plain.profiles == []  # docs/spec.md §3.6: off by default

    on = {**OFF, "profiles_in_context": True}
    result = memory.retrieve(agent, "Where does Ana work?", config_overrides=on)
    assert result.context.startswith("Known facts:")  # the spec's sections keep their place
    tail = result.context.split("About Ana:\n- ")[1]
    assert tail.startswith("Ana (person):") and "Vertix" in tail
    assert [(p.entity_key, p.method) for p in result.profiles] == [("person:ana", "template-v1")]
    assert result.trace["profiles_shown"] == 1
    assert [f.fact_id for f in result.facts] == [f.fact_id for f in plain.facts]  # context only

    small = memory.retrieve(agent, "Where does Ana work?",
                            config_overrides={**on, "context_max_tokens": 60})
    assert len(small.context) <= 60 * 4 + 8 and "About Ana:" in small.context
    assert memory.retrieve(agent, "Where does Bob work?", config_overrides=on).profiles == []
    as_of = memory.retrieve(agent, "Where does Ana work?", as_of=datetime.now(UTC),
                            config_overrides=on)
    assert as_of.profiles == []  # profiles are not bi-temporal


def test_importance_and_pattern_levers_move_only_when_switched_on(memory: Memory) -> None:
    agent = _ana(memory, [("f1", "Ana plays tennis on weekends"),
                          ("f2", "Ana plays chess on weekends"),
                          ("f3", "Ana plays golf on weekends")])
    query = "What does Ana play on weekends?"
    before = memory.retrieve(agent, query, config_overrides=OFF)
    order = [f.fact_id for f in before.facts]
    assert len(order) == 3
    last = order[-1]
    jobs = JobContext(memory).jobs_aggregate(agent)
    jobs.assess_importance("test", {last: 1.0, **{f: 0.2 for f in order[:-1]}}, {}, NOW)
    memory.app.save(jobs)
    memory.wait_for_projections()
    same = memory.retrieve(agent, query, config_overrides=OFF)
    assert [f.fact_id for f in same.facts] == order  # default: the jobs move nothing
    assert "job_factor" not in same.facts[0].scores
    boosted = memory.retrieve(agent, query, config_overrides={**OFF, "importance_boost": 0.6})
    assert boosted.facts[0].fact_id == last and boosted.facts[0].scores["job_factor"] == 1.0
    assert all(0.0 <= f.score <= 1.0 for f in boosted.facts)

    jobs = JobContext(memory).jobs_aggregate(agent)
    jobs.observe_pattern("p_t", "test", "Ana plays on weekends", [order[1]], [], 0.9, "test")
    memory.app.save(jobs)
    memory.wait_for_projections()
    assert [f.fact_id for f in memory.retrieve(agent, query, config_overrides=OFF).facts] == order
    evidence = memory.retrieve(agent, query, config_overrides={**OFF, "pattern_fact_boost": 0.5})
    assert evidence.facts[0].fact_id == order[1]
    assert evidence.trace["candidates"]["pattern_evidence"] == 1


def test_regular_gaps_and_the_pattern_text() -> None:
    tuesdays = [date(2025, 3, 4) + timedelta(days=7 * k) for k in range(4)]
    assert regular(tuesdays) == 7.0
    assert "every Tuesday (4 times, 2025-03-04 to 2025-03-25)" in describe(
        "Ana", "Goes to yoga.", tuesdays, 7.0)
    fortnight = [date(2025, 1, 1), date(2025, 1, 15), date(2025, 1, 30)]
    assert regular(fortnight) == 14.5
    assert "about every 14.5 days" in describe("Ana", "Visits her mother", fortnight, 14.5)
    assert regular([date(2025, 1, 1), date(2025, 1, 2), date(2025, 2, 20)]) is None  # irregular
    assert regular(tuesdays[:2]) is None  # two is not a habit
    assert regular([date(2025, 1, 1)] * 3) is None  # one day, said three times


def test_consolidation_finds_a_weekly_activity_across_messages(memory: Memory) -> None:
    agent = f"w-{uuid.uuid4().hex[:6]}"
    mem = memory.app.agent_memory(agent)
    mem.register_entity("person:ana", "Ana", "person", None, {"by": "t"})
    tuesday = datetime(2025, 3, 4, 19, tzinfo=UTC)
    texts = ["I went to yoga class", "Yoga class again tonight", "Back from yoga class",
             "Yoga class was hard"]
    for k, text in enumerate(texts):
        at = tuesday + timedelta(days=7 * k)
        rec = MessageRecord(agent_id=agent, message_id=f"m{k}", session_id=None, speaker="Ana",
                            text=text, occurred_at=at, metadata={})
        if k == 0:
            mem.add_fact(_fact("y1", "Ana goes to yoga class", ["m0"]))
        elif k == 1:
            mem.confirm_fact("y1", "m1", at)  # a repetition taken as a NOOP
        else:
            mem.add_fact(_fact(f"y{k}", f"Ana had a yoga class{' again' * (k - 1)}", [f"m{k}"]))
        memory.app.save(mem, rec)
        mem = memory.app.agent_memory(agent)
    mem.add_fact(_fact("z1", "Ana bought a red bike", ["m3"]))
    memory.app.save(mem)
    memory.wait_for_projections()
    consolidation = [BY_NAME["consolidation"]]
    assert run_pass(JobContext(memory), consolidation, [agent])[0].status == "ok"
    memory.wait_for_projections()
    with memory.pool.connection() as conn:
        rows = conn.execute("SELECT pattern_text, supporting_fact_ids, method, message_ids "
                            "FROM mem_patterns WHERE agent_id = %s AND kind = 'periodic'",
                            (agent,)).fetchall()
    assert len(rows) == 1
    text, facts, method, messages = rows[0]
    assert text.startswith('Ana: "Ana goes to yoga class" — every Tuesday (4 times')
    assert sorted(facts) == ["y1", "y2", "y3"] and "z1" not in facts
    assert method == "deterministic:periodic" and messages == ["m0", "m1", "m2", "m3"]
    assert run_pass(JobContext(memory), consolidation, [agent])[0].events == 0  # idempotent


def _recent(memory: Memory, texts: list[str]) -> str:
    return _ana(memory, [(f"f{k}", t) for k, t in enumerate(texts, start=1)])


def test_llm_consolidation_recorded_once_and_fail_safe(memory: Memory) -> None:
    from engramdb.domain.jobs import agent_jobs_id
    from engramdb.infra.providers.openai_llm import OpenAILLM
    from engramdb.services.extraction.llm_budget import consolidation_max_tokens
    from tests.support.fake_openai_server import run_fake_openai

    def answer(body: dict[str, Any]) -> Any:  # scripted per input: what the facts say
        user = body["messages"][-1]["content"]
        if "yoga" in user:
            return {"patterns": [{"text": "Ana keeps up a weekly yoga practice", "kind": "habit",
                                  "evidence": [1, 3], "confidence": 0.8}]}
        if "chess" in user:
            return {"patterns": [{"text": "Ana plays", "evidence": [1, 9]}]}  # cites no fact 9
        if "golf" in user:
            return {"patterns": [{"text": "x" * 180, "kind": "other", "evidence": [1, 2],
                                  "confidence": 0.5}] * 5 + [{"text": "y" * 2000}]}  # cut
        return "not json at all"

    good = _recent(memory, ["Ana goes to yoga on Tuesdays", "Ana bought a mat",
                            "Ana did yoga with Bob", "Ana likes tea"])
    chess = _recent(memory, ["Ana plays chess", "Ana won at chess", "Ana lost at chess"])
    golf = _recent(memory, ["Ana plays golf", "Ana likes golf", "Ana watched golf"])
    consolidation = [BY_NAME["consolidation"]]
    with run_fake_openai(answer) as base_url:
        memory.llm = OpenAILLM("fake", base_url=base_url, api_key="k", max_retries=0)
        try:
            run = run_pass(JobContext(memory), consolidation, [good])[0]
            assert run.status == "ok", run
            memory.wait_for_projections()
            chats = [r for r in base_url.requests if r["path"].endswith("/chat/completions")]
            assert len(chats) == 1
            assert chats[0]["body"]["max_tokens"] == consolidation_max_tokens()
            assert chats[0]["body"]["response_format"]["type"] == "json_schema"
            events = list(memory.app.events.get(agent_jobs_id(good)))
            reviewed = [e for e in events if type(e).__name__ == "ConsolidationReviewed"]
            by_llm = [e for e in events if getattr(e, "method", "") == "llm:consolidation/v1"
                      and type(e).__name__ == "PatternObserved"]
            assert len(reviewed) == 1 and len(by_llm) == 1
            newest_first = ["f4", "f3", "f2", "f1"]  # the prompt numbers facts newest first
            assert by_llm[0].fact_ids == sorted([newest_first[0], newest_first[2]])
            assert by_llm[0].text == "Ana keeps up a weekly yoga practice"
            assert json.loads(by_llm[0].llm_output)["patterns"][0]["kind"] == "habit"
            assert reviewed[0].pattern_ids == [by_llm[0].pattern_id]
            # unchanged memory: the LLM is not asked again and its pattern stands
            assert run_pass(JobContext(memory), consolidation, [good])[0].events == 0
            assert len([r for r in base_url.requests if r["path"].endswith("/chat/completions")]) == 1

            for agent, why in ((chess, "cites facts outside"), (golf, "ProviderTruncated")):
                failed = run_pass(JobContext(memory), consolidation, [agent])[0]
                assert failed.status == "failed" and why in (failed.error or ""), failed
                kinds = [type(e).__name__ for e in memory.app.events.get(agent_jobs_id(agent))]
                assert "ConsolidationReviewed" not in kinds  # nothing from the LLM recorded
                assert "PatternObserved" in kinds  # the deterministic patterns are saved
            # the LLM down: the standing LLM pattern is not retired, the run says why
            base_url.fail_with(503)
            mem = memory.app.agent_memory(good)
            mem.add_fact(_fact("f9", "Ana bought yoga blocks"))
            memory.app.save(mem)
            memory.wait_for_projections()
            down = run_pass(JobContext(memory, llm_timeout_sec=5), consolidation, [good])[0]
            assert down.status == "failed" and "consolidation LLM call failed" in (down.error or "")
            memory.wait_for_projections()
            with memory.pool.connection() as conn:
                assert conn.execute("SELECT count(*) FROM mem_patterns WHERE agent_id = %s AND "
                                    "method = 'llm:consolidation/v1'", (good,)).fetchone()[0] == 1
        finally:
            memory.llm = None
    memory.wait_for_projections()
    memory.rebuild("memory")  # replay: no LLM (it is gone), same patterns
    with memory.pool.connection() as conn:
        methods = [r[0] for r in conn.execute(
            "SELECT method FROM mem_patterns WHERE agent_id = %s ORDER BY method", (good,))]
    assert "llm:consolidation/v1" in methods


def test_an_old_conversation_ingested_today_is_judged_by_its_own_dates(memory: Memory) -> None:
    """Regression (LoCoMo, 2023 conversations stored in 2026): the jobs took "now" from
    when facts were *stored*, so no fact was ever "recent" and every fact was "stale"."""
    agent = f"o-{uuid.uuid4().hex[:6]}"
    mem = memory.app.agent_memory(agent)
    mem.register_entity("person:ana", "Ana", "person", None, {"by": "t"})
    then = datetime(2023, 5, 8, tzinfo=UTC)
    for k, text in enumerate(["Ana adopted a dog", "Ana painted a lake", "Ana ran a race"]):
        mem.add_fact(dataclasses.replace(_fact(f"o{k}", text), valid_from=then - timedelta(days=k)))
    memory.app.save(mem)
    memory.wait_for_projections()
    ctx = JobContext(memory)
    run_pass(ctx, [BY_NAME["consolidation"], BY_NAME["vitality"]], [agent])
    memory.wait_for_projections()
    with memory.pool.connection() as conn:
        kinds = [r[0] for r in conn.execute(
            "SELECT kind FROM mem_patterns WHERE agent_id = %s", (agent,))]
        low = conn.execute("SELECT count(*) FROM mem_fact_usage WHERE agent_id = %s "
                           "AND low_vitality", (agent,)).fetchone()[0]
    assert kinds == ["recurring topic"]  # three facts within a week of the memory's clock
    assert low == 0  # days old on the memory's clock, not years
