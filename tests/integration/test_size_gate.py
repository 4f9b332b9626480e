"""The agent-size gate (ADR-0038): the exact-or-HNSW verdict counted once per retrieve (or
kept while the agent is far from the threshold) instead of once per statement, with the
same statements' results — against real PostgreSQL + pgvector."""

# ruff: noqa: F811  (pytest fixtures imported from test_retrieve_support)
from __future__ import annotations

from datetime import timedelta
from typing import Any

from test_retrieve_support import T0, Store, store  # noqa: F401  (fixtures)

from engramdb.services.retrieve import Retriever
from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.signals import message_lists, semantic_facts
from engramdb.services.retrieve.size_gate import SizeGate


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Undecided:
    """The path before the gate: every statement counts for itself (``small`` None)."""

    def verdicts(self, conn: Any, agent_id: str) -> dict[str, bool | None]:
        return {"mem_facts": None, "mem_messages": None}


def _fill(store: Store, agent: str, facts: int, messages: int, start: int = 0) -> None:
    topics = ["marathon training", "baking bread", "a trip to Lisbon", "painting sunsets", "chess"]
    for i in range(start, start + facts):
        store.fact(agent, f"f{i}", "person:ana", f"Ana talked about {topics[i % 5]} ({i})",
                   valid_from=T0 - timedelta(days=i))
    for i in range(start, start + messages):
        store.message(agent, f"m{i}", f"We spoke of {topics[i % 5]} again, time {i}", T0 - timedelta(hours=i),
                      speaker="Ana")


def test_verdicts_follow_the_count_and_are_kept_only_far_from_the_threshold(store: Store, agent_id: str) -> None:
    clock = Clock()
    gate = SizeGate(exact_rows=4, ttl=60.0, clock=clock)
    _fill(store, agent_id, facts=2, messages=9)  # facts far below (2*2 <= 4), messages far above (9 > 8)
    with store.pool.connection() as conn:
        assert gate.verdicts(conn, agent_id) == {"mem_facts": True, "mem_messages": False}
        _fill(store, agent_id, facts=4, messages=0, start=100)  # now 6 facts: above the threshold
        assert gate.verdicts(conn, agent_id)["mem_facts"] is True  # kept: both were far from it
        clock.now = 61.0
        assert gate.verdicts(conn, agent_id) == {"mem_facts": False, "mem_messages": False}
        # 6 facts is near the threshold (4 < 6 <= 8): not kept, each call counts again
        store._exec("DELETE FROM mem_facts WHERE agent_id = %s AND fact_id IN ('f100', 'f101')", (agent_id,))
        assert gate.verdicts(conn, agent_id)["mem_facts"] is True  # 4 facts: counted, small again
    assert SizeGate(exact_rows=0).verdicts(None, agent_id) == {"mem_facts": None, "mem_messages": None}


def test_a_known_verdict_runs_the_branch_the_count_would_choose(store: Store, agent_id: str) -> None:
    """The decided statement (one branch, no count) gives what the counting one gives, for a
    small and a large agent, facts and turns, with and without an instant."""
    _fill(store, agent_id, facts=12, messages=12)
    cfg = RetrieveConfig().with_overrides({"candidate_pool": 5})
    qvec = store.vec("a trip to Lisbon")
    with store.pool.connection() as conn:
        for exact_rows, verdict in ((50, True), (6, False)):
            for as_of in (None, T0 - timedelta(hours=3)):
                counted = semantic_facts(conn, agent_id, qvec, cfg, 0.0, as_of, exact_rows)
                decided = semantic_facts(conn, agent_id, qvec, cfg, 0.0, as_of, exact_rows, verdict)
                assert decided == counted and counted
                counted_turns = message_lists(conn, agent_id, qvec, "trip Lisbon", cfg, 0.0, as_of, exact_rows)
                decided_turns = message_lists(conn, agent_id, qvec, "trip Lisbon", cfg, 0.0, as_of, exact_rows,
                                              verdict)
                assert decided_turns == counted_turns and counted_turns[1]


def test_retrieve_with_the_gate_answers_as_without_it(store: Store, agent_id: str) -> None:
    _fill(store, agent_id, facts=30, messages=30)
    store.entity(agent_id, "person:ana", "Ana")
    queries = ["What trips did Ana take?", "marathon training", "Which paintings has Ana made?"]
    for exact_rows in (10, 20_000):  # the agent large, then small
        with Retriever(store.pool, store.embedder, exact_search_rows=exact_rows) as gated, \
                Retriever(store.pool, store.embedder, exact_search_rows=exact_rows) as counted:
            counted._size_gate = Undecided()  # type: ignore[assignment]
            for query in queries:
                a, b = gated.retrieve(agent_id, query), counted.retrieve(agent_id, query)
                assert [f.model_dump() for f in a.facts] == [f.model_dump() for f in b.facts] and a.facts
                assert [e.model_dump() for e in a.events] == [e.model_dump() for e in b.events]
