"""Tenant isolation (property-based), hostile queries and config validation on the real DB."""

# ruff: noqa: F811  (pytest fixtures imported from test_retrieve_support)
from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_retrieve_support import EMBEDDER, Store, load_worked_examples, retriever, store  # noqa: F401

from engramdb.services.retrieve import Retriever, UnknownConfigKey

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    facts=st.lists(
        st.tuples(st.integers(0, 2), st.lists(st.sampled_from(WORDS), min_size=1, max_size=4)),
        min_size=1,
        max_size=15,
    ),
    query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
)
def test_never_returns_another_agents_rows(store: Store, retriever: Retriever, facts: list, query: list) -> None:
    run = uuid.uuid4().hex[:8]
    agents = [f"iso-{run}-{i}" for i in range(3)]
    owner: dict[str, str] = {}
    for n, (agent_index, words) in enumerate(facts):
        agent = agents[agent_index]
        fid = f"f-{run}-{n}"
        owner[fid] = agent
        store.entity(agent, f"thing:{words[0]}-{n}", words[0].title()) if n % 3 == 0 else None
        store.fact(agent, fid, f"thing:{words[0]}-{n}", " ".join(words), links=[f"thing:{words[-1]}"])
        store.message(agent, f"m-{run}-{n}", " ".join(words))
        if n:
            store.relationship(agent, f"thing:{words[0]}-{n}", f"thing:{words[0]}-{n - 1}", "near")
    text = " ".join(query)
    for agent in agents:
        # min_score 0: a fact matching only a word frequent in its agent's memory scores low
        # (IDF), but it must still be *found* — and never another agent's
        result = retriever.retrieve(agent, text, config_overrides={"min_score": 0.0})
        assert all(owner[f.fact_id] == agent for f in result.facts)
        assert all(e.message_id.startswith(f"m-{run}-") for e in result.events)
        assert all(owner[f"f-{run}-{e.message_id.rsplit('-', 1)[1]}"] == agent for e in result.events)
        expected = {fid for fid, a in owner.items() if a == agent and set(query) & set(facts[int(fid.rsplit('-', 1)[1])][1])}
        assert expected <= {f.fact_id for f in result.facts}  # and it does find its own rows


HOSTILE = [
    "%",
    "_",
    "\\",
    "%%%___\\\\",
    "' OR 1=1 --",
    "'; DROP TABLE mem_facts; --",
    "Robert'); DELETE FROM mem_facts WHERE ('1'='1",
    "100% sure_thing\\",
    '"; SELECT pg_sleep(5); --',
    "$$ $1 %(a)s {0} %s",
    "x\x00y",
    "\ud800 lone surrogate",
    "🙂🙃 emoji only",
    "   ",
    "",
]


def test_hostile_queries_are_harmless(retriever: Retriever, store: Store, agent_id: str) -> None:
    load_worked_examples(store, agent_id)
    store.fact(agent_id, "f_percent", "person:user", "I am 100% sure_thing\\ about it")
    for query in HOSTILE:
        result = retriever.retrieve(agent_id, query)
        assert result.duration_ms < 3000
        if "100%" not in query:
            # LIKE metacharacters are literals: "%" does not match every fact
            assert all(f.scores["keyword"] == 0 for f in result.facts), query
    literal = retriever.retrieve(agent_id, "100% sure_thing\\")
    assert literal.facts[0].fact_id == "f_percent" and literal.facts[0].scores["keyword"] == 1.0
    assert retriever.retrieve(agent_id, "").plan.reason == "empty"
    assert retriever.retrieve(agent_id, "x\x00y").query == "x y"
    # the tables survived
    with store.pool.connection() as conn:
        assert conn.execute("SELECT count(*) FROM mem_facts WHERE agent_id = %s", (agent_id,)).fetchone()[0] == 12


def test_huge_query_is_truncated(retriever: Retriever, store: Store, agent_id: str) -> None:
    load_worked_examples(store, agent_id)
    huge = "Where does Marcos Tavares live? " + "blah " * 20_000  # ~100 kB
    result = retriever.retrieve(agent_id, huge)
    assert result.trace["query_truncated"] and len(result.query) <= 2000
    assert result.facts[0].fact_id == "f_marcos_home"


def test_bad_agent_ids_and_overrides(retriever: Retriever) -> None:
    for bad in ("", "   ", "a\x00b", "has space", "x" * 201):
        with pytest.raises(ValueError, match="agent_id"):
            retriever.retrieve(bad, "Where does Marcos live?")
    with pytest.raises(UnknownConfigKey) as err:
        retriever.retrieve("someone", "Where does Marcos live?", config_overrides={"topk": 3, "bogus": 1})
    assert "'bogus'" in str(err.value) and "'topk'" in str(err.value)
    with pytest.raises(ValueError, match="reranker_weight"):
        retriever.retrieve("someone", "Where does Marcos live?", config_overrides={"reranker_weight": -1})
    with pytest.raises(ValueError, match="wait_for"):
        retriever.retrieve("someone", "Where does Marcos live?", wait_for=3)


def test_overrides_change_behaviour(retriever: Retriever, store: Store, agent_id: str) -> None:
    load_worked_examples(store, agent_id)
    query = "What happened with Vertix?"
    assert len(retriever.retrieve(agent_id, query).facts) > 2
    assert len(retriever.retrieve(agent_id, query, config_overrides={"topk_facts": 2}).facts) == 2
    assert retriever.retrieve(agent_id, query, config_overrides={"topk_events": 0}).events == []
    strict = retriever.retrieve(agent_id, query, config_overrides={"min_score": 0.99, "ranking": "formula"})
    assert strict.facts == [] and strict.trace["candidates"]["dropped_min_score"] > 0
    waited: list[int] = []
    with Retriever(store.pool, EMBEDDER, wait_for_position=waited.append) as r:
        r.retrieve(agent_id, query, wait_for=42)
    assert waited == [42]
