"""Reciprocal-rank fusion of facts and turns (services/retrieve/fusion.py), pure functions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from engramdb.services.retrieve.fusion import (
    EVENT,
    FACT,
    best_possible,
    fuse_candidates,
    reciprocal_rank_fusion,
    without_repeats,
)
from engramdb.services.retrieve.rank import Candidate, EventCandidate
from engramdb.services.retrieve.signals import FactCandidate

WHEN = datetime(2024, 5, 1, tzinfo=UTC)


def fact(fid: str, *sources: str) -> Candidate:
    return Candidate(FactCandidate(fid, "person:ana", "Ana", f"text of {fid}", 0.9, 0.5, 0, WHEN, list(sources), 0.5))


def turn(mid: str) -> EventCandidate:
    return EventCandidate(mid, f"turn {mid}", WHEN, "Ana", "s1", 0.5, 0.0)


def test_rrf_sums_weighted_reciprocal_ranks() -> None:
    fused = reciprocal_rank_fusion(
        {"a": (FACT, ["f1", "f2"]), "b": (FACT, ["f2", "f3"]), "m": (EVENT, ["m1"])},
        {"a": 1.0, "b": 0.5, "m": 1.0},
        k=10,
    )
    scores = {(u.kind, u.unit_id): u.score for u in fused}
    assert scores[(FACT, "f2")] == pytest.approx(1 / 12 + 0.5 / 11)
    assert scores[(FACT, "f1")] == pytest.approx(1 / 11)
    assert scores[(EVENT, "m1")] == pytest.approx(1 / 11)
    assert [u.unit_id for u in fused] == ["f2", "f1", "m1", "f3"]  # tie f1/m1: facts first
    assert fused[0].ranks == {"a": 2, "b": 1}


def test_zero_weight_lists_and_repeated_ids_count_once() -> None:
    fused = reciprocal_rank_fusion({"a": (FACT, ["f1", "f1"]), "off": (FACT, ["f9"])}, {"a": 1.0, "off": 0.0}, 10)
    assert [(u.unit_id, u.ranks) for u in fused] == [("f1", {"a": 1})]


def test_a_turn_cited_by_a_fact_above_it_is_not_repeated_and_vice_versa() -> None:
    fused = reciprocal_rank_fusion(
        {"facts": (FACT, ["f1", "f2"]), "turns": (EVENT, ["m1", "m3", "m2"])},
        {"facts": 1.0, "turns": 1.0},
        10,
    )
    kept = without_repeats(fused, {"f1": ["m1"], "f2": ["m2", "m3"]})
    # f1 (covers m1) > m1 (dropped) ; f2 covers m2, m3 -> both turns dropped
    assert [(u.kind, u.unit_id) for u in kept] == [(FACT, "f1"), (FACT, "f2")]
    kept = without_repeats(
        reciprocal_rank_fusion({"turns": (EVENT, ["m1"]), "facts": (FACT, ["f1"])}, {"turns": 1.0, "facts": 0.5}, 10),
        {"f1": ["m1"]},
    )
    assert [(u.kind, u.unit_id) for u in kept] == [(EVENT, "m1")]  # the fact adds no new turn


def test_fuse_candidates_scores_in_unit_interval_and_drops_units_in_no_list() -> None:
    facts = [fact("f1", "m1"), fact("f2", "m2"), fact("lonely", "m9")]
    events = [turn("m1"), turn("m3")]
    lists = {"fs": (FACT, ["f2", "f1", "unknown"]), "ms": (EVENT, ["m3", "m1"])}
    weights = {"fs": 1.0, "ms": 1.0}
    out_facts, out_events, counts = fuse_candidates(lists, weights, 10, facts, events)
    assert [c.fact_id for c in out_facts] == ["f2", "f1"]
    assert [e.message_id for e in out_events] == ["m3"]  # m1 is f1's source, ranked below it
    assert counts == {"fused": 4, "dropped_repeats": 1}
    assert out_facts[0].final == pytest.approx((1 / 11) / best_possible(weights, lists, 10))
    assert all(0 < c.final <= 1 for c in out_facts + out_events)
    assert out_facts[0].scores["rrf"] == out_facts[0].final and out_facts[0].scores["rank_fs"] == 1.0
