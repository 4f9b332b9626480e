"""ADR-0041: the tail lists' anchors come from the head's placement alone, and a call's
second fusion reuses the first's head — both must give exactly what full fusions give."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from engramdb.services.retrieve.fusion import EVENT, FACT, fuse_candidates, head_units
from engramdb.services.retrieve.rank import Candidate, EventCandidate
from engramdb.services.retrieve.signals import FactCandidate
from engramdb.services.retrieve.tail_lists import top_units

DAY = datetime(2024, 5, 1, tzinfo=UTC)
TAIL = ("fact_person", "message_person", "message_neighbour")


def _units(rng: random.Random) -> tuple[list[Candidate], list[EventCandidate]]:
    events = [EventCandidate(f"m{i}", f"turn {i}", DAY + timedelta(days=i % 3), "Ana", "s1", 0.5, 0.0)
              for i in range(rng.randint(3, 30))]
    facts = []
    for i in range(rng.randint(0, 25)):
        cites = [e.message_id for e in rng.sample(events, rng.randint(0, 2))]
        facts.append(Candidate(FactCandidate(f"f{i}", "person:ana", "Ana", f"fact {i}", 0.9, 0.5, 0,
                                       DAY + timedelta(days=i % 4), cites, 0.5)))
    return facts, events


def _lists(rng: random.Random, facts: list[Candidate], events: list[EventCandidate],
           neighbours: bool) -> dict[str, tuple[str, list[str]]]:
    fact_ids, event_ids = [c.fact_id for c in facts], [e.message_id for e in events]

    def some(ids: list[str]) -> list[str]:
        return rng.sample(ids, rng.randint(0, len(ids))) if ids else []

    lists = {"fact_semantic": (FACT, some(fact_ids)), "fact_keyword": (FACT, some(fact_ids)),
             "message_semantic": (EVENT, some(event_ids)), "message_keyword": (EVENT, some(event_ids)),
             "fact_person": (FACT, some(fact_ids) if rng.random() < 0.6 else []),
             "message_person": (EVENT, some(event_ids) if rng.random() < 0.6 else [])}
    if neighbours:
        lists["message_neighbour"] = (EVENT, some(event_ids))
    return lists


WEIGHTS = {"fact_semantic": 1.0, "fact_keyword": 1.0, "message_semantic": 1.0, "message_keyword": 1.0,
           "fact_person": 0.5, "message_person": 0.5, "message_neighbour": 1.0}


def test_head_units_are_the_top_of_the_full_fusion_ties_included() -> None:
    rng = random.Random(11)
    answered = 0
    for _ in range(400):
        facts, events = _units(rng)
        lists = _lists(rng, facts, events, neighbours=False)
        # equal weights and a small k make rounded ties between a fact and a turn common
        weights = {n: rng.choice([1.0, 0.5]) for n in WEIGHTS}
        start, n = rng.choice([0, 3, 10]), rng.choice([1, 3, 10, 12])
        fused, fused_events, _ = fuse_candidates(lists, weights, 1.0, facts, events,
                                                 tail_lists=TAIL, tail_start=start)
        got = head_units(lists, weights, 1.0, facts, events, n, tail_lists=TAIL, tail_start=start)
        if got is None:  # only when the top would reach below the head
            assert start > 0
            continue
        answered += 1
        assert got == top_units(fused, fused_events, n)
    assert answered > 250


def test_a_second_fusion_with_the_call_memo_equals_one_without() -> None:
    rng = random.Random(5)
    for _ in range(200):
        facts, events = _units(rng)
        first = _lists(rng, facts, events, neighbours=False)
        second = {**first, "message_neighbour": (EVENT, [e.message_id for e in rng.sample(events, 3)])}
        memo: dict = {}
        head_units(first, WEIGHTS, 5.0, facts, events, 10, tail_lists=TAIL, tail_start=10, memo=memo)
        with_memo = fuse_candidates(second, WEIGHTS, 5.0, facts, events, tail_lists=TAIL, tail_start=10, memo=memo)
        order = ([c.fact_id for c in with_memo[0]], [e.message_id for e in with_memo[1]],
                 [c.final for c in with_memo[0]], [e.final for e in with_memo[1]], with_memo[2])
        plain = fuse_candidates(second, WEIGHTS, 5.0, facts, events, tail_lists=TAIL, tail_start=10)
        assert order == ([c.fact_id for c in plain[0]], [e.message_id for e in plain[1]],
                         [c.final for c in plain[0]], [e.final for e in plain[1]], plain[2])
        assert len(memo) == 2, "the second fusion placed only its full fusion, the head was the first's"
