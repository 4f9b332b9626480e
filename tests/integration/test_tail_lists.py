"""The tail lists (ADR-0037): pure parts (which units anchor them, how neighbours are
ordered) and, against real PostgreSQL + pgvector, that the neighbour list brings the turn said
right after a found turn, that dense feedback brings a fact that shares words only with the
fused top, and that the head of the ranking stays what it was.
"""

# ruff: noqa: F811  (pytest fixtures imported from test_retrieve_support)
from __future__ import annotations

from datetime import timedelta

import pytest
from test_retrieve_support import T0, Store, retriever, store  # noqa: F401  (fixtures)

from engramdb.services.retrieve import Retriever
from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.fusion import EVENT, FACT
from engramdb.services.retrieve.tail_lists import (
    TAIL_LISTS,
    anchor_turns,
    by_speaker,
    enabled,
    order_neighbours,
    top_units,
)


class _Row:
    def __init__(self, sources: list[str]) -> None:
        self.source_message_ids = sources


class _Fact:  # the two fields top_units reads of a rank.Candidate
    def __init__(self, fact_id: str, final: float) -> None:
        self.fact_id, self.final = fact_id, final


class _Event:
    def __init__(self, message_id: str, final: float) -> None:
        self.message_id, self.final = message_id, final


def test_the_neighbour_list_is_on_by_default_as_cross_validated_feedback_off_and_bounded() -> None:
    # `nb-1-s4`, chosen in every fold of three observation runs and of the configured run
    # (ADR-0037); the named people's own turns first, span 2, anchors from the top 15
    # (`nb-named-first-s2-d15`, ADR-0040)
    cfg = RetrieveConfig()
    assert cfg.fusion.rrf_weights["message_neighbour"] == 1.0
    assert (cfg.tail_lists.neighbour_span, cfg.tail_lists.neighbour_depth, cfg.tail_lists.neighbour_order) == (2, 15, "anchor")
    assert cfg.tail_lists.neighbour_speakers == "named-first"
    assert cfg.fusion.rrf_weights["fact_feedback"] == cfg.fusion.rrf_weights["message_feedback"] == 0.0  # never chosen
    assert set(TAIL_LISTS) == {"fact_feedback", "message_feedback", "message_neighbour"}
    off = cfg.with_overrides({"rrf_weights": {"message_neighbour": 0.0}})
    assert enabled(cfg.fusion.rrf_weights) and not enabled(off.fusion.rrf_weights)
    for bad in ({"neighbour_span": 0}, {"neighbour_speakers": "everyone"}, {"feedback_depth": 0}, {"feedback_beta": -1.0}, {"neighbour_depth": 1000}):
        with pytest.raises(ValueError):
            cfg.with_overrides(bad)


def test_top_units_merge_facts_and_turns_by_fused_score() -> None:
    facts = [_Fact("f1", 0.9), _Fact("f2", 0.5)]
    events = [_Event("m1", 0.9), _Event("m2", 0.7), _Event("m3", 0.1)]
    got = top_units(facts, events, 4)  # type: ignore[arg-type]
    assert got == [(FACT, "f1"), (EVENT, "m1"), (EVENT, "m2"), (FACT, "f2")]  # a tie: the fact first
    assert top_units(facts, events, 0) == []  # type: ignore[arg-type]


def test_anchor_turns_are_a_turn_itself_or_a_facts_sources_in_rank_order() -> None:
    units = [(FACT, "f1"), (EVENT, "m9"), (FACT, "f2"), (EVENT, "m1")]
    assert anchor_turns(units, {"f1": ["m1", "m2"], "f2": []}) == ["m1", "m2", "m9"]


def test_neighbours_of_the_best_anchor_first_nearest_first_the_turn_before_on_a_tie() -> None:
    anchors = ["a", "b"]
    pairs = [("b", "b+1", 1), ("a", "a+2", 2), ("a", "a+1", 1), ("a", "a-1", -1), ("a", "b", 3),
             ("b", "a+1", -1), ("zz", "x", 1), ("a", "a", 0)]
    # "b" is an anchor (already ranked): never listed as a neighbour; "a+1" once, at a's place
    assert order_neighbours(anchors, pairs) == ["a-1", "a+1", "a+2", "b+1"]
    assert order_neighbours([], pairs) == []
    # by distance: every anchor's nearest turns first (best anchor first), then the next ring
    assert order_neighbours(anchors, pairs, "distance") == ["a-1", "a+1", "b+1", "a+2"]


def test_by_speaker_puts_the_named_peoples_own_turns_first_counted_in_their_turns() -> None:
    # (anchor, neighbour, offset, said by a named person): a two-person exchange around "a",
    # walked 2 x span = 4 turns a side; Tim (named) says every other turn
    pairs = [("a", "x-1", -1, False), ("a", "t-2", -2, True), ("a", "x-3", -3, False), ("a", "t-4", -4, True),
             ("a", "x+1", 1, False), ("a", "t+2", 2, True), ("a", "x+3", 3, False), ("a", "t+4", 4, True)]
    near = [("a", "x-1", -1), ("a", "t-2", -2), ("a", "x+1", 1), ("a", "t+2", 2)]
    assert by_speaker(pairs, 2, "all") == (near, [])
    named = [("a", "t-2", -1), ("a", "t-4", -2), ("a", "t+2", 1), ("a", "t+4", 2)]  # offsets in Tim's turns
    assert by_speaker(pairs, 2, "named") == (named, [])
    assert by_speaker(pairs, 2, "named-first") == (named, [("a", "x-1", -1), ("a", "x+1", 1)])
    assert order_neighbours(["a"], by_speaker(pairs, 2, "named")[0]) == ["t-2", "t+2", "t-4", "t+4"]
    # the named person said nothing near the top (not a speaker here): every turn, as "all"
    nobody = [(a, n, d, False) for a, n, d, _ in pairs]
    assert by_speaker(nobody, 2, "named") == (near, [])
    assert by_speaker(nobody, 2, "named-first") == ([], near)


# ----------------------------------------------------------------------------- end to end

SMALL = {"candidate_pool": 6, "enable_reranker": False, "topk_events": 20, "topk_facts": 20,
         "rrf_weights": {"message_neighbour": 0.0}}  # pinned off: each test switches on what it shows


def test_the_neighbour_list_brings_the_turn_said_after_a_found_turn(
    retriever: Retriever, store: Store, agent_id: str
) -> None:
    s = store
    day = T0 - timedelta(days=3)
    # one session, turns said in this order (same occurred_at: the order is as recorded)
    said = [("m_q", "What did you do last weekend?", "Ana"),
            ("m_camp", "We went camping by the lake", "Tim"),
            ("m_next", "The kids loved roasting marshmallows", "Tim"),
            ("m_far", "Anyway how is work going", "Ana")]
    for i, (mid, text, who) in enumerate(said):
        s.message(agent_id, mid, text, day, speaker=who, session_id="s7", recorded_at=day + timedelta(seconds=i))
    s.message(agent_id, "m_other", "Marshmallows are sweet", T0, speaker="Ana", session_id="s8")
    query = "camping lake"
    off = retriever.retrieve(agent_id, query, config_overrides=SMALL)
    assert off.events and off.events[0].message_id == "m_camp"
    assert "m_next" not in [e.message_id for e in off.events]  # no word of the question: no list has it
    on_cfg = {**SMALL, "rrf_weights": {"message_neighbour": 1.0}, "neighbour_depth": 1, "neighbour_span": 1,
              "person_lists_from": 1}
    on = retriever.retrieve(agent_id, query, config_overrides=on_cfg)
    ranks = {e.message_id: e.scores.get("rank_message_neighbour") for e in on.events}
    assert on.events[0].message_id == "m_camp"  # the head is the other lists' fusion
    assert ranks.get("m_q") == 1.0 and ranks.get("m_next") == 2.0  # the turn before first on a tie
    # the neighbour's row comes with the neighbours' statement (ADR-0041): all of it, as said
    said_next = next(e for e in on.events if e.message_id == "m_next")
    assert (said_next.text, said_next.speaker, said_next.session_id) == (
        "The kids loved roasting marshmallows", "Tim", "s7")
    assert said_next.occurred_at == day
    assert "m_far" not in ranks and "m_other" not in ranks  # two places away; another session
    assert on.trace["candidates"]["neighbour_messages"] == 2
    wider = retriever.retrieve(agent_id, query, config_overrides={**on_cfg, "neighbour_span": 2})
    assert {e.message_id: e.scores.get("rank_message_neighbour") for e in wider.events}.get("m_far") == 3.0
    assert "tail_lists" not in off.trace.get("timings_ms", {})
    # a hidden turn (the source of a retracted fact, ADR-0016) is never a neighbour: the next
    # visible turn takes its place
    s._exec("INSERT INTO mem_hidden_messages (agent_id, message_id, hidden_at, fact_id) VALUES (%s, %s, %s, %s)",
            (agent_id, "m_next", T0, "f_gone"))
    hidden = retriever.retrieve(agent_id, query, config_overrides=on_cfg)
    ranks_h = {e.message_id: e.scores.get("rank_message_neighbour") for e in hidden.events}
    assert "m_next" not in ranks_h and ranks_h.get("m_far") == 2.0


def test_dense_feedback_brings_a_fact_that_shares_words_only_with_the_fused_top(
    retriever: Retriever, store: Store, agent_id: str
) -> None:
    s = store
    s.entity(agent_id, "person:tim", "Tim")
    s.fact(agent_id, "f_top", "person:tim", "Tim camping lake trip with marshmallows and guitar songs")
    s.fact(agent_id, "f_tail", "person:tim", "marshmallows guitar songs", valid_from=T0 - timedelta(days=2))
    for i, word in enumerate(["bakes", "paints", "codes", "swims", "sings"]):
        s.fact(agent_id, f"f_{word}", "person:tim", f"Tim {word} at home", valid_from=T0 - timedelta(days=9 + i))
    query = "camping lake trip"
    base = {**SMALL, "rrf_weights": {"fact_subject": 0.0, "message_subject": 0.0, "message_neighbour": 0.0}}
    off = retriever.retrieve(agent_id, query, config_overrides=base)
    assert off.facts[0].fact_id == "f_top"
    assert "f_tail" not in [f.fact_id for f in off.facts]
    on_cfg = {**base, "rrf_weights": {"fact_subject": 0.0, "message_subject": 0.0, "message_neighbour": 0.0,
                                      "fact_feedback": 1.0,
                                      "message_feedback": 1.0}, "feedback_depth": 1, "person_lists_from": 1}
    on = retriever.retrieve(agent_id, query, config_overrides=on_cfg)
    found = {f.fact_id: f for f in on.facts}
    assert on.facts[0].fact_id == "f_top"  # the head stays
    assert "f_tail" in found and found["f_tail"].scores["rank_fact_feedback"] <= 2.0
    assert on.trace["candidates"]["feedback_facts"] >= 2
    assert all(0.0 < f.score <= 1.0 for f in on.facts)
    # feedback 0: the question alone (f_top's words are not f_tail's): f_tail falls back
    plain = retriever.retrieve(agent_id, query, config_overrides={**on_cfg, "feedback_beta": 0.0})
    plain_rank = {f.fact_id: f.scores.get("rank_fact_feedback") for f in plain.facts}
    assert plain_rank.get("f_tail") is None or plain_rank["f_tail"] > found["f_tail"].scores["rank_fact_feedback"]


def test_the_head_of_the_ranking_is_the_other_lists_fusion(
    retriever: Retriever, store: Store, agent_id: str
) -> None:
    s = store
    s.entity(agent_id, "person:tim", "Tim")
    for i in range(12):
        s.fact(agent_id, f"f{i}", "person:tim", f"Tim camping trip note {i} lake" + " word" * i,
               valid_from=T0 - timedelta(days=i), source_message_id=f"m{i}")
        s.message(agent_id, f"m{i}", f"camping trip {i}" + " more" * i, T0 - timedelta(days=i), speaker="Tim",
                  session_id=f"s{i // 3}")
    query = "Which camping trips has Tim been on?"
    off = retriever.retrieve(agent_id, query, config_overrides=SMALL)
    on = retriever.retrieve(agent_id, query, config_overrides={
        **SMALL, "rrf_weights": {"fact_feedback": 1.0, "message_feedback": 1.0, "message_neighbour": 1.0},
        "person_lists_from": 5})

    def merged(result: object) -> list[tuple[str, float]]:
        units = [(f.score, 0, f.fact_id) for f in result.facts] + [(e.score, 1, e.message_id) for e in result.events]  # type: ignore[attr-defined]
        return [(u[2], u[0]) for u in sorted(units, key=lambda u: (-u[0], u[1]))]

    # the first fusion drops turns a fact above cites (m0 … m11 are the facts' sources): the
    # second must start from every candidate again, or the lists' ranks shift and the head moves
    assert off.trace["candidates"]["dropped_repeats"] > 0
    assert merged(on)[:5] == merged(off)[:5]  # same units, same scores
    assert merged(on) != merged(off)  # the tail did change


def test_the_second_fusion_keeps_the_turns_the_first_dropped_as_repeats(
    retriever: Retriever, store: Store, agent_id: str
) -> None:
    """m_a is f_a's source: the first fusion drops it (a fact above says it). Fused again
    from its *output*, m_a would be missing from the turn lists, m_b would move up to their
    first rank and score more than it does today: the head must not move."""
    s = store
    s.entity(agent_id, "person:tim", "Tim")
    s.fact(agent_id, "f_a", "person:tim", "camping lake trip", source_message_id="m_a")
    day = T0 - timedelta(days=1)
    for i, (mid, text) in enumerate([("m_a", "camping lake trip"), ("m_b", "camping lake"), ("m_c", "camping"),
                                     ("m_d", "what a weekend")]):
        s.message(agent_id, mid, text, day, speaker="Tim", session_id="s1", recorded_at=day + timedelta(seconds=i))
    query = "camping lake trip"
    off = retriever.retrieve(agent_id, query, config_overrides=SMALL)
    on = retriever.retrieve(agent_id, query, config_overrides={
        **SMALL, "rrf_weights": {"message_neighbour": 1.0}, "neighbour_depth": 3, "person_lists_from": 3})
    assert off.trace["candidates"]["dropped_repeats"] >= 1

    def scored(result: object) -> dict[str, float]:
        return {**{f.fact_id: f.score for f in result.facts}, **{e.message_id: e.score for e in result.events}}  # type: ignore[attr-defined]

    head = sorted(scored(off).items(), key=lambda kv: -kv[1])[:3]
    assert [(k, scored(on)[k]) for k, _ in head] == head
    assert "m_d" in scored(on) and "m_d" not in scored(off)  # the neighbour of m_c, in the tail


def test_named_neighbours_reach_the_named_persons_turns_past_the_other_sides_replies(
    retriever: Retriever, store: Store, agent_id: str
) -> None:
    """ADR-0040: when the question names a speaker, the neighbour list takes their own turns
    first — the evidence of "what has Tim …" is what Tim said, two turns on, not Ana's reply."""
    s = store
    s.entity(agent_id, "person:tim", "Tim")
    s.entity(agent_id, "person:ana", "Ana")
    day = T0 - timedelta(days=3)
    said = [("m_camp", "We went camping by the lake", "Tim"),
            ("m_ana1", "Oh nice, how was it", "Ana"),
            ("m_tim2", "The kids loved roasting marshmallows", "Tim"),
            ("m_ana2", "Sounds lovely", "Ana"),
            ("m_tim3", "Next time we bring the canoe", "Tim")]
    for i, (mid, text, who) in enumerate(said):
        s.message(agent_id, mid, text, day, speaker=who, session_id="s7", recorded_at=day + timedelta(seconds=i))
    query = "Which camping trips has Tim been on by the lake?"
    cfg = {**SMALL, "rrf_weights": {"message_neighbour": 1.0, "message_keyword": 1.0}, "neighbour_depth": 1,
           "neighbour_span": 2, "person_lists_from": 1, "neighbour_speakers": "all"}

    def ranks(result: object) -> dict[str, float | None]:
        return {e.message_id: e.scores.get("rank_message_neighbour") for e in result.events}  # type: ignore[attr-defined]

    plain = retriever.retrieve(agent_id, query, config_overrides=cfg)
    assert plain.events[0].message_id == "m_camp"
    assert ranks(plain).get("m_ana1") == 1.0 and ranks(plain).get("m_tim2") == 2.0
    assert ranks(plain).get("m_tim3") is None  # three places away (the sweep may list it, not as a neighbour)
    named = retriever.retrieve(agent_id, query, config_overrides={**cfg, "neighbour_speakers": "named"})
    assert named.events[0].message_id == "m_camp"  # the head is the other lists' fusion
    got = ranks(named)
    assert got.get("m_tim2") == 1.0 and got.get("m_tim3") == 2.0  # Tim's next two turns
    assert got.get("m_ana1") is None and got.get("m_ana2") is None
    first = ranks(retriever.retrieve(agent_id, query, config_overrides={**cfg, "neighbour_speakers": "named-first"}))
    assert (first.get("m_tim2"), first.get("m_tim3"), first.get("m_ana1")) == (1.0, 2.0, 3.0)
    # the default (ADR-0040) is "named-first"
    default_cfg = {k: v for k, v in cfg.items() if k != "neighbour_speakers"}
    assert ranks(retriever.retrieve(agent_id, query, config_overrides=default_cfg)) == first
    # no name in the question: every turn, as "all"
    unnamed = "camping trips by the lake"
    assert ranks(retriever.retrieve(agent_id, unnamed, config_overrides={**cfg, "neighbour_speakers": "named"})) == \
        ranks(retriever.retrieve(agent_id, unnamed, config_overrides=cfg))
