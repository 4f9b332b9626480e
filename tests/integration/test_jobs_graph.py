"""Sleep-time jobs of ADR-0022: communities of the entity graph, entity profiles (summary
refresh), fact vitality. Each: events on ``AgentJobs``, projected, idempotent, visible where
the issue says (planner expansion, ``list_entities``, ``engramdb history``, retrieve).

Real PostgreSQL from the fixtures; embedder ``HashEmbedder``; the LLM of the profile job is
a deterministic fake implementing the ``LLMProvider`` protocol.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engramdb.domain.jobs import agent_jobs_id
from engramdb.domain.payloads import FactPayload
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.jobs import BY_NAME, JobContext
from engramdb.services.jobs.runner import run_pass
from engramdb.services.management.models import PageParams
from engramdb.services.management.queries import list_entities
from engramdb.services.memory.facade import Memory

NOW = datetime.now(UTC)


@pytest.fixture
def memory(fresh_schema: Any) -> Iterator[Memory]:
    _, env = fresh_schema("jobs2")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield mem


def _run(memory: Memory, job: str, agent: str, **ctx: Any) -> Any:
    run = run_pass(JobContext(memory, **ctx), [BY_NAME[job]], [agent])[0]
    memory.wait_for_projections()
    return run


def _kinds(memory: Memory, agent: str) -> list[str]:
    return [type(e).__name__ for e in memory.app.events.get(agent_jobs_id(agent))]


def _fact(fid: str, entity: str, text: str, days: float = 0.0) -> FactPayload:
    return FactPayload(
        fact_id=fid, entity_key=entity, linked_entities=[], attribute_key=None, text=text,
        category="general", confidence=0.9, importance=0.5, source_message_id=f"m-{fid}",
        source_message_ids=[f"m-{fid}"], speaker="Ana",
        valid_from=NOW - timedelta(days=days), decided_by={"by": "t"})


def _graph_agent(memory: Memory) -> str:
    agent = f"g-{uuid.uuid4().hex[:6]}"
    mem = memory.app.agent_memory(agent)
    for name in ("Ana", "Bob", "Carl", "Dora", "Xia", "Yan", "Zoe"):
        mem.register_entity(f"person:{name.lower()}", name, "person", None, {"by": "t"})
    for a, b in (("ana", "bob"), ("bob", "carl"), ("carl", "dora"), ("bob", "dora"),
                 ("ana", "carl"), ("xia", "yan"), ("yan", "zoe"), ("xia", "zoe")):
        mem.observe_relationship(f"person:{a}", f"person:{b}", "knows", None, NOW)
    mem.add_fact(_fact("f-dora", "person:dora", "Dora plays the cello"))
    memory.app.save(mem)
    memory.wait_for_projections()
    return agent


def test_communities_are_stable_and_the_planner_may_expand_within_them(memory: Memory) -> None:
    agent = _graph_agent(memory)
    assert _run(memory, "communities", agent).events == 2
    with memory.pool.connection() as conn:
        rows = conn.execute("SELECT members, label, method FROM mem_communities "
                            "WHERE agent_id = %s ORDER BY members", (agent,)).fetchall()
    assert [r[0] for r in rows] == [["person:ana", "person:bob", "person:carl", "person:dora"],
                                    ["person:xia", "person:yan", "person:zoe"]]
    assert rows[1][1] == "Xia, Yan and Zoe" and rows[0][2] == "louvain-v1"
    assert _run(memory, "communities", agent).events == 0  # unchanged membership: nothing

    # Dora is not Ana's neighbour: only community expansion plans her (off by default)
    query = "What does Ana like?"
    plain = memory.retrieve(agent, query)
    assert "person:dora" not in [e.entity_key for e in plain.plan.entities]
    expanded = memory.retrieve(agent, query, config_overrides={"community_expansion": True})
    assert "person:dora" in [e.entity_key for e in expanded.plan.entities]

    # a changed membership is a new community; the old one is dissolved
    mem = memory.app.agent_memory(agent)
    mem.register_entity("person:eve", "Eve", "person", None, {"by": "t"})
    mem.observe_relationship("person:eve", "person:xia", "knows", None, NOW)
    mem.observe_relationship("person:eve", "person:zoe", "knows", None, NOW)
    memory.app.save(mem)
    memory.wait_for_projections()
    assert _run(memory, "communities", agent).events == 2
    assert _kinds(memory, agent).count("CommunityDissolved") == 1


class FakeProfileLLM:
    """Deterministic ``LLMProvider``: a profile naming the facts it was given."""

    name = "fake-profile"

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[int | None] = []
        self.fail = fail

    def complete(self, messages: Sequence[dict[str, Any]], temperature: float = 0,
                 response_format: dict[str, Any] | None = None,
                 max_tokens: int | None = None) -> str:
        self.calls.append(max_tokens)
        if self.fail:
            raise ConnectionError("provider down")
        facts = [ln[2:] for ln in messages[-1]["content"].splitlines() if ln.startswith("- ")]
        return f"A person. Known facts: {len(facts)}. " + " ".join(facts)


def test_profiles_offline_then_by_llm_on_the_memory_clock(memory: Memory) -> None:
    agent = f"pr-{uuid.uuid4().hex[:6]}"
    mem = memory.app.agent_memory(agent)
    mem.register_entity("person:ana", "Ana", "person", None, {"by": "t"})
    mem.add_fact(_fact("f1", "person:ana", "Ana lives in Lisbon"))
    mem.add_fact(_fact("f2", "person:ana", "Ana works at Vertix"))
    memory.app.save(mem)
    memory.wait_for_projections()

    assert _run(memory, "profiles", agent).events == 1
    page = list_entities(memory.pool, agent, PageParams(limit=10))
    ana = page.items[0]
    assert ana.profile_method == "template-v1"
    assert "Ana lives in Lisbon" in ana.profile and "Ana works at Vertix" in ana.profile
    assert _run(memory, "profiles", agent).events == 0  # idempotent

    # a new fact inside the interval: no refresh; past it (by the memory's clock): refreshed
    mem = memory.app.agent_memory(agent)
    mem.add_fact(_fact("f3", "person:ana", "Ana has a cat"))
    memory.app.save(mem)
    memory.wait_for_projections()
    assert _run(memory, "profiles", agent).events == 0

    down = FakeProfileLLM(fail=True)
    memory.llm = down
    try:
        failed = _run(memory, "profiles", agent, summary_refresh_interval_days=1e-9)
        assert failed.status == "failed" and "LLM" in (failed.error or "")
        llm = FakeProfileLLM()
        memory.llm = llm
        assert _run(memory, "profiles", agent, summary_refresh_interval_days=1e-9).events == 1
    finally:
        memory.llm = None
    assert llm.calls and all(n is not None and n <= 200 for n in llm.calls)  # bounded
    last = list(memory.app.events.get(agent_jobs_id(agent)))[-1]
    assert last.method == "llm:profile/v1" and last.llm_output.startswith("A person.")
    assert sorted(last.fact_ids) == ["f1", "f2", "f3"]
    ana = list_entities(memory.pool, agent, PageParams(limit=10)).items[0]
    assert ana.profile.startswith("A person. Known facts: 3.")
    assert ana.profile_refreshed_at == last.reference_time


def test_vitality_flags_stale_facts_never_deletes_and_shows_in_history(memory: Memory) -> None:
    agent = f"v-{uuid.uuid4().hex[:6]}"
    mem = memory.app.agent_memory(agent)
    mem.register_entity("person:ana", "Ana", "person", None, {"by": "t"})
    mem.add_fact(_fact("f-old", "person:ana", "Ana played tennis at school", days=700))
    mem.add_fact(_fact("f-new", "person:ana", "Ana plays padel on Sundays"))
    memory.app.save(mem)
    memory.wait_for_projections()

    assert _run(memory, "vitality", agent).events == 1
    with memory.pool.connection() as conn:
        rows = {r[0]: r[1:] for r in conn.execute(
            "SELECT u.fact_id, u.vitality, u.low_vitality, f.status FROM mem_fact_usage u "
            "JOIN mem_facts f USING (agent_id, fact_id) WHERE u.agent_id = %s", (agent,))}
    assert rows["f-old"][1:] == (True, "active") and rows["f-new"][1] is False
    assert rows["f-old"][0] < 0.3 <= rows["f-new"][0]
    assert _run(memory, "vitality", agent).events == 0  # same buckets: nothing

    history = memory.history(agent, "f-old")  # `engramdb history --agent A --fact F`
    vital = [h for h in history if h.decision == "VITALITY"]
    assert len(vital) == 1 and vital[0].detail["low"] is True and vital[0].reason
    assert [h.decision for h in history][0] == "ADD"

    # retrieve may down-weight flagged facts (off by default)
    query = "What sports does Ana play?"
    base = {f.fact_id: f.score for f in memory.retrieve(agent, query).facts}
    weighted = {f.fact_id: f.score for f in memory.retrieve(
        agent, query, config_overrides={"low_vitality_weight": 0.5}).facts}
    assert "f-old" in base and weighted["f-old"] == pytest.approx(base["f-old"] * 0.5, abs=2e-6)
    assert weighted["f-new"] == base["f-new"]


def test_new_job_state_loads_from_a_snapshot_taken_before_it_existed() -> None:
    """ADR-0022 state is created on first use: an ADR-0019 snapshot (no such attribute)
    still loads, and the aggregate goes on idempotently from it."""
    from eventsourcing.domain import Snapshot

    from engramdb.domain.jobs import AgentJobs

    jobs = AgentJobs(agent_id="a")
    jobs.assess_importance("t", {"f1": 0.6}, {}, NOW)
    snapshot = Snapshot.take(jobs)
    assert "communities" not in snapshot.state and "vitality" not in snapshot.state
    loaded: Any = snapshot.mutate(None)
    assert loaded.state_of("communities") == {} and loaded.fact_importance == {"f1": 0.6}
    assert loaded.detect_community("c1", ["person:b", "person:a"], "A and B", "t")
    assert not loaded.detect_community("c1", ["person:a", "person:b"], "A and B", "t")
    assert loaded.assess_vitality("t", {"f1": 0.21}, {"f1"}, NOW)
    assert not loaded.assess_vitality("t", {"f1": 0.22}, {"f1"}, NOW)  # same bucket
    assert loaded.assess_vitality("t", {"f1": 0.31}, set(), NOW)  # flag and bucket changed
