"""ADR-0041: the patterns of the returned facts, picked from those of every candidate asked
beside the last stages — the same patterns, in the same order, as asking after them."""

from __future__ import annotations

import random
from datetime import timedelta

# ruff: noqa: F811  (pytest fixtures imported from test_retrieve_support)
from test_retrieve_support import EMBEDDER, T0, Store, store  # noqa: F401  (fixtures)

from engramdb.infra.read_pool import open_worker_pool
from engramdb.services.retrieve.pipeline import Retriever
from engramdb.services.retrieve.signals import patterns_for, patterns_from, prefetch_patterns

WORDS = ["tea", "late", "budget", "run"]


def test_patterns_from_the_candidates_are_the_patterns_of_the_subset(store: Store, agent_id: str) -> None:
    rng = random.Random(3)
    facts = [f"f{i}" for i in range(40)]
    for i in range(30):  # supports overlapping, confidences with ties, some texts matching words
        text = f"pattern {i} " + " ".join(rng.sample(WORDS + ["walks", "reads", "cooks"], 2))
        store.pattern(agent_id, f"p_{i:02x}", text, rng.sample(facts, rng.randint(0, 4)),
                      confidence=rng.choice([0.5, 0.7, 0.9]))
    store.pattern("someone-else", "p_ff", "tea late budget", facts[:4])  # another agent's: never
    with store.pool.connection() as conn:
        for _ in range(60):
            candidates = rng.sample(facts, 25)
            words = rng.sample(WORDS, rng.randint(0, 2))
            near = prefetch_patterns(conn, agent_id, candidates, words, None)
            returned = rng.sample(candidates, rng.randint(0, 20))
            limit = rng.choice([1, 3, 5, 50])
            asked = patterns_for(conn, agent_id, returned, words, limit, None)
            assert patterns_from(near, returned, words, limit) == asked
        near = prefetch_patterns(conn, agent_id, facts[:5], [], None)
        assert patterns_from(near, ["f39"], [], 5) is None  # not a candidate: the caller asks the database


def test_a_retriever_with_workers_shows_the_patterns_one_without_shows(store: Store, agent_id: str,
                                                                      pg_url: str) -> None:
    s = store
    for i, text in enumerate(["Ana works late at night on the roadmap", "Ana works late on the budget",
                              "Ana drinks tea in the morning", "Ana runs on Sundays"]):
        s.fact(agent_id, f"f{i}", "person:ana", text, valid_from=T0 - timedelta(days=i))
    s.pattern(agent_id, "p_late", "Prefers working late at night", ["f0", "f1"])
    s.pattern(agent_id, "p_tea", "Has tea every morning", ["f2"], confidence=0.6)
    s.pattern(agent_id, "p_words", "Budget season is busy", [])  # only the words match it
    workers = open_worker_pool(pg_url, s.schema)
    try:
        with Retriever(s.pool, EMBEDDER) as inline, Retriever(s.pool, EMBEDDER, worker_pool=workers) as beside:
            for query in ("When does Ana work late?", "What about the budget?", "tea"):
                a = inline.retrieve(agent_id, query)
                b = beside.retrieve(agent_id, query)
                assert [f.fact_id for f in b.facts] == [f.fact_id for f in a.facts]
                assert [p.model_dump() for p in b.patterns] == [p.model_dump() for p in a.patterns]
            late = beside.retrieve(agent_id, "When does Ana work late?")
            assert "p_late" in [p.pattern_id for p in late.patterns]
    finally:
        workers.close()
