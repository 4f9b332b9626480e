"""Issue 9 levers (ADR-0021): diversity across days after fusion, query decomposition and
the fusion of the parts' rankings, time expressions matched to dates. Pure functions, no
database."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.decompose import MAX_PARTS, fuse_runs, sub_queries
from engramdb.services.retrieve.diversity import diversify
from engramdb.services.retrieve.fusion import EVENT, FACT, fuse_candidates
from engramdb.services.retrieve.hedges import without_hedges
from engramdb.services.retrieve.rank import Candidate, EventCandidate
from engramdb.services.retrieve.signals import FactCandidate
from engramdb.services.retrieve.timeexpr import Window, in_windows, time_windows

DAY1 = datetime(2024, 5, 1, 10, tzinfo=UTC)
DAY2 = DAY1 + timedelta(days=7)


def fact(fid: str, when: datetime, *sources: str, final: float = 0.0) -> Candidate:
    cand = Candidate(FactCandidate(fid, "person:ana", "Ana", f"text of {fid}", 0.9, 0.5, 0, when, list(sources), 0.5))
    cand.final = final
    return cand


def turn(mid: str, when: datetime, final: float = 0.0) -> EventCandidate:
    ev = EventCandidate(mid, f"turn {mid}", when, "Ana", "s1", 0.5, 0.0)
    ev.final = final
    return ev


# ----------------------------------------------------------------------------- diversity


def test_diversify_off_is_the_identity() -> None:
    assert diversify(["a", "b", "c"], [0.9, 0.8, 0.7], ["d1", "d1", "d1"], 0.0) == [
        ("a", 0.9), ("b", 0.8), ("c", 0.7)]


def test_diversify_lifts_a_unit_of_another_day_above_repeats_of_one_day() -> None:
    placed = diversify(["a", "b", "c", "x"], [1.0, 0.9, 0.8, 0.6], ["d1", "d1", "d1", "d2"], 0.5)
    # b: 0.9*0.5 = 0.45, c: 0.8*0.25 = 0.2, x: 0.6 (first of its day)
    assert [u for u, _ in placed] == ["a", "x", "b", "c"]
    assert [s for _, s in placed] == pytest.approx([1.0, 0.6, 0.45, 0.2])
    scores = [s for _, s in placed]
    assert scores == sorted(scores, reverse=True)  # the order a caller sorting by score sees


def test_diversify_free_units_of_a_source_are_not_discounted() -> None:
    placed = diversify(["a", "b", "c", "x"], [1.0, 0.9, 0.8, 0.6], ["d1", "d1", "d1", "d2"], 0.5, free=2)
    # a, b free; c: 0.8*0.5 = 0.4 < x 0.6
    assert placed == [("a", 1.0), ("b", 0.9), ("x", 0.6), ("c", 0.4)]
    with pytest.raises(ValueError, match="free"):
        diversify(["a"], [1.0], ["d"], 0.5, free=0)


def test_diversify_from_start_keeps_the_top_as_fused_and_spreads_only_the_tail() -> None:
    units, scores = ["a", "b", "c", "d", "x"], [1.0, 0.9, 0.8, 0.7, 0.6]
    days = ["d1", "d1", "d1", "d1", "d2"]
    # from the top, x (another day) jumps to second place
    assert [u for u, _ in diversify(units, scores, days, 0.5)][:2] == ["a", "x"]
    # start=3: a, b, c stay where fusion put them (and count as shown); below them x beats d
    placed = diversify(units, scores, days, 0.5, start=3)
    assert placed[:3] == [("a", 1.0), ("b", 0.9), ("c", 0.8)]
    assert [u for u, _ in placed[3:]] == ["x", "d"]
    assert placed[4][1] == pytest.approx(0.7 * 0.5**3)  # d1's fourth unit, three discounts
    values = [s for _, s in placed]
    assert values == sorted(values, reverse=True)
    assert diversify(units, scores, days, 0.5, start=5) == list(zip(units, scores, strict=True))
    with pytest.raises(ValueError, match="start"):
        diversify(units, scores, days, 0.5, start=-1)


def test_diversify_never_penalises_units_of_unknown_source_and_rejects_bad_penalty() -> None:
    placed = diversify(["a", "b"], [1.0, 0.9], [None, None], 0.9)
    assert placed == [("a", 1.0), ("b", 0.9)]
    with pytest.raises(ValueError, match="penalty"):
        diversify(["a"], [1.0], ["d"], 1.5)


def test_fuse_candidates_spreads_the_top_over_days_when_asked() -> None:
    facts = [fact("f1", DAY1, "m1"), fact("f2", DAY1, "m2"), fact("f3", DAY2, "m3")]
    lists = {"fact_semantic": (FACT, ["f1", "f2", "f3"])}
    plain, _, _ = fuse_candidates(lists, {"fact_semantic": 1.0}, 5, facts, [])
    assert [c.fact_id for c in plain] == ["f1", "f2", "f3"]
    spread, _, _ = fuse_candidates(lists, {"fact_semantic": 1.0}, 5, facts, [], diversity_penalty=0.5)
    assert [c.fact_id for c in spread] == ["f1", "f3", "f2"]
    assert spread[1].final > spread[2].final


def test_fuse_candidates_tail_lists_count_only_below_the_head() -> None:
    """ADR-0034: with ``tail_start``, the first units are the fusion of the other lists (as if
    the tail lists were off); the tail lists re-order only what comes after."""
    facts = [fact(f"f{i}", DAY1, f"m{i}") for i in range(1, 6)]
    lists = {"fact_semantic": (FACT, ["f1", "f2", "f3", "f4", "f5"]),
             "fact_person": (FACT, ["f5", "f2", "f4"])}
    weights = {"fact_semantic": 1.0, "fact_person": 1.0}
    off, _, _ = fuse_candidates(lists, {"fact_semantic": 1.0}, 5, facts, [])
    everywhere, _, _ = fuse_candidates(lists, weights, 5, facts, [])
    assert [c.fact_id for c in everywhere][:3] == ["f2", "f5", "f4"]  # the person list reorders the top
    tail, _, _ = fuse_candidates(lists, weights, 5, facts, [], tail_lists=("fact_person",), tail_start=2)
    ids = [c.fact_id for c in tail]
    assert ids[:2] == [c.fact_id for c in off][:2] == ["f1", "f2"]
    assert ids[2:] == ["f5", "f4", "f3"]  # below the head: the fusion of every list
    scores = [c.final for c in tail]
    assert scores == sorted(scores, reverse=True) and all(0.0 < v <= 1.0 for v in scores)
    # tail list off (weight 0) or absent: the plain fusion
    same, _, _ = fuse_candidates(lists, {"fact_semantic": 1.0, "fact_person": 0.0}, 5, facts, [],
                                 tail_lists=("fact_person",), tail_start=2)
    assert [c.fact_id for c in same] == [c.fact_id for c in off]


def test_fuse_candidates_tail_skips_a_turn_its_head_fact_already_cites() -> None:
    facts = [fact("f1", DAY1, "m1")]
    events = [turn("m1", DAY1), turn("m2", DAY2)]
    lists = {"fact_semantic": (FACT, ["f1"]), "message_person": (EVENT, ["m1", "m2"])}
    weights = {"fact_semantic": 1.0, "message_person": 1.0}
    out_f, out_e, _ = fuse_candidates(lists, weights, 5, facts, events,
                                      tail_lists=("message_person",), tail_start=1)
    assert [c.fact_id for c in out_f] == ["f1"] and [e.message_id for e in out_e] == ["m2"]


def test_config_levers_defaults_are_the_cross_validated_choice_and_bounded() -> None:
    cfg = RetrieveConfig()  # ADR-0021: the time boost and the hedge words earned their place
    assert cfg.fusion.diversity_penalty == 0.0 and cfg.fusion.decompose is False
    assert cfg.fusion.time_boost == 1.0 and cfg.fusion.drop_hedges is True
    with pytest.raises(ValueError):
        cfg.with_overrides({"diversity_penalty": 2})


# ----------------------------------------------------------------------------- decomposition


@pytest.mark.parametrize(
    ("query", "parts"),
    [
        ("What do Caroline and Melanie both like?", ["What do Caroline like?", "What do Melanie like?"]),
        ("What activities have Jon and Gina done together?",
         ["What activities have Jon done?", "What activities have Gina done?"]),
        ("Where did Gina go and what did she buy there?", ["Where did Gina go", "what did she buy there?"]),
        ("What is Rita's job? Where does she live?", ["What is Rita's job", "Where does she live?"]),
        ("O que o João e a Maria têm em comum?", ["O que o João têm?", "O que o Maria têm?"]),
    ],
)
def test_sub_queries_split_pairs_of_names_and_joined_questions(query: str, parts: list[str]) -> None:
    assert sub_queries(query) == parts


@pytest.mark.parametrize(
    "query",
    ["When did Jon go to Paris?", "What did I and John do?", "Bread and butter?", "", "Who is Ana?"],
)
def test_sub_queries_leave_simple_questions_whole(query: str) -> None:
    assert sub_queries(query) == []


def test_sub_queries_are_capped() -> None:
    query = "; ".join(f"where did person {i} go" for i in range(6))
    assert len(sub_queries(query)) == MAX_PARTS


def test_fuse_runs_keeps_what_each_part_ranks_first_and_drops_repeats() -> None:
    whole = ([fact("f1", DAY1, "m1", final=0.9)], [turn("m2", DAY1, 0.8), turn("m9", DAY1, 0.7)])
    part_a = ([fact("f1", DAY1, "m1", final=0.9)], [turn("m1", DAY1, 0.5)])  # m1 repeats f1
    part_b = ([], [turn("m3", DAY2, 0.9), turn("m2", DAY1, 0.1)])
    facts, events = fuse_runs([whole, part_a, part_b], k=5)
    assert [c.fact_id for c in facts] == ["f1"]
    assert facts[0] is whole[0][0]  # the whole question's candidate object
    order = sorted([(c.final, FACT, c.fact_id) for c in facts] + [(e.final, EVENT, e.message_id) for e in events],
                   reverse=True)
    assert [uid for _, _, uid in order] == ["f1", "m2", "m3", "m9"]  # m1 dropped: f1 shows it
    assert all(0.0 < s <= 1.0 for s, _, _ in order)
    # f1: ranked first by two of three runs -> 2/6 over the best possible 3/6
    assert facts[0].final == pytest.approx((1 / 6 + 1 / 6) / (3 / 6))


# ----------------------------------------------------------------------------- time expressions

ANCHOR = datetime(2023, 10, 20, 15, tzinfo=UTC)


@pytest.mark.parametrize(
    ("query", "start", "end"),
    [
        ("What did Gina find on 1 February, 2023?", date(2023, 1, 30), date(2023, 2, 3)),
        ("What was she accepted for on May 23, 2023?", date(2023, 5, 21), date(2023, 5, 25)),
        ("What setback did Melanie face in October 2023?", date(2023, 10, 1), date(2023, 10, 31)),
        ("O que ela fez em maio de 2023?", date(2023, 5, 1), date(2023, 5, 31)),
        ("O que aconteceu a 3 de março de 2024?", date(2024, 3, 1), date(2024, 3, 5)),
        ("How often did she swim in 2023?", date(2023, 1, 1), date(2023, 12, 31)),
        ("Onde foste em 2022?", date(2022, 1, 1), date(2022, 12, 31)),
        ("What did we see during the trip last year?", date(2022, 1, 1), date(2022, 12, 31)),
        ("O que fizemos no ano passado?", date(2022, 1, 1), date(2022, 12, 31)),
        ("Where did he go last May?", date(2023, 5, 1), date(2023, 5, 31)),
        ("Where did he go last December?", date(2022, 12, 1), date(2022, 12, 31)),
        ("What did I eat yesterday?", date(2023, 10, 17), date(2023, 10, 20)),
        ("O que comi ontem?", date(2023, 10, 17), date(2023, 10, 20)),
        ("What happened last month?", date(2023, 9, 1), date(2023, 9, 30)),
    ],
)
def test_time_windows_en_pt(query: str, start: date, end: date) -> None:
    assert time_windows(query, ANCHOR) == [Window(start, end)]


def test_a_month_without_year_matches_that_month_of_any_year() -> None:
    (window,) = time_windows("When did Melanie go camping in June?", ANCHOR)
    assert window == Window(month_of_year=6)
    assert in_windows([window], datetime(2019, 6, 30, tzinfo=UTC))
    assert not in_windows([window], datetime(2023, 7, 1, tzinfo=UTC))


@pytest.mark.parametrize(
    "query", ["Maria may come to dinner", "What is her favourite set of paints?", "Who is Ana?", "2023 plans"]
)
def test_no_time_named_no_window(query: str) -> None:
    assert time_windows(query, ANCHOR) == []


def test_fuse_candidates_time_boost_lifts_units_in_the_window_and_keeps_scores_in_range() -> None:
    may, june = datetime(2023, 5, 2, tzinfo=UTC), datetime(2023, 6, 9, tzinfo=UTC)
    facts = [fact("f_june", june, "m1"), fact("f_may", may, "m2")]
    lists = {"fact_semantic": (FACT, ["f_june", "f_may"])}
    windows = time_windows("in May 2023", ANCHOR)
    plain, _, _ = fuse_candidates(lists, {"fact_semantic": 1.0}, 5, facts, [], 0.0, windows, 0.0)
    assert [c.fact_id for c in plain] == ["f_june", "f_may"]
    boosted, _, _ = fuse_candidates(lists, {"fact_semantic": 1.0}, 5, facts, [], 0.0, windows, 1.0)
    assert [c.fact_id for c in boosted] == ["f_may", "f_june"]
    assert all(0.0 < c.final <= 1.0 for c in boosted)


# ----------------------------------------------------------------------------- hedge words


@pytest.mark.parametrize(
    ("query", "kept"),
    [
        ("Would Caroline likely have Dr. Seuss books on her bookshelf?", "Caroline have Dr. Seuss books on her bookshelf?"),
        ("What might John's financial status be?", "What John's financial status be?"),
        ("Would Melanie be considered an ally?", "Melanie be an ally?"),
        ("A Ana seria provavelmente considerada vegetariana?", "A Ana vegetariana?"),
        ("What did she do in May 2023?", "What did she do in May 2023?"),
        ("would likely?", "would likely?"),  # nothing left: the query as it was
    ],
)
def test_without_hedges(query: str, kept: str) -> None:
    assert without_hedges(query) == kept
