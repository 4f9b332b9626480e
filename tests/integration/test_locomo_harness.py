"""The LoCoMo benchmark harness: data repair, scoring math, baselines, playback extractor.

All unit tests build their own tiny LoCoMo-format conversation (LoCoMo itself is
CC BY-NC and must not be copied into the repo). The smoke runs read the shared dev file at
run time and are skipped when it is absent. The only fake is ``HashEmbedder`` (a
deterministic bag-of-words embedder implementing the Protocol, honest about being one).
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bench.locomo.ablate import ABLATIONS, FULL, ablation_markdown, merged_overrides
from bench.locomo.baselines import BM25Index, DenseIndex, rank_by_scores, rrf
from bench.locomo.cv import (
    Candidate,
    GridError,
    best_candidate,
    cross_validate,
    cv_markdown,
    cv_summary,
    objective,
    parse_grid,
)
from bench.locomo.data import (
    normalize_evidence_id,
    parse_conversation,
    parse_session_datetime,
    repair_evidence,
    subset,
)
from bench.locomo.facts_cosine import FactsCosineIndex, StoredFact
from bench.locomo.observations import ObservationExtractor
from bench.locomo.run import (
    DEFAULT_DATA,
    MemoEmbedder,
    ScoredUnit,
    aggregate,
    all_at_k,
    main,
    merge_units,
    percentile,
    recall_at_k,
    score_units,
)
from engramdb.domain.extraction import ConfidenceLevel, ExtractionInput
from engramdb.infra.providers.scripted import HashEmbedder
from tests.support.counting_embedder import CountingHashEmbedder


def synthetic_sample(sample_id: str = "syn-1") -> dict[str, Any]:
    """A made-up two-session conversation in LoCoMo's JSON shape, with its quirks."""
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Ada",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ada", "dia_id": "D1:1", "text": "I adopted a grey cat named Pixel."},
                {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely! I bought a kayak last week."},
                {
                    "speaker": "Ada",
                    "dia_id": "D1:3",
                    "text": "Look at this.",
                    "blip_caption": "a photo of a cat on a sofa",
                },
            ],
            "session_2_date_time": "12:06 am on 11 November, 2023",
            "session_2": [
                {"speaker": "Bo", "dia_id": "D2:1", "text": "The kayak trip on the lake was cold."},
                {"speaker": "Ada", "dia_id": "D2:2", "text": "Pixel learned to open doors."},
            ],
            "session_3_date_time": "9:00 am on 1 December, 2023",  # a date with no session
        },
        "observation": {
            "session_1_observation": {
                "Ada": [["Ada has a grey cat named Pixel.", "D1:1"]],
                "Bo": [["Bo bought a kayak.", ["D1:2", "D2:1"]]],
            },
            "session_2_observation": {"Ada": [["Ada's cat Pixel can open doors.", "D2:2"]]},
        },
        "qa": [
            {
                "question": "What is Ada's cat called?",
                "answer": "Pixel",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "Where did Bo kayak?",
                "answer": "a lake",
                "evidence": ["D1:2; D2:1"],
                "category": 1,
            },
            {"question": "When?", "answer": "Nov", "evidence": ["D:2:01", "D"], "category": 2},
            {
                "question": "Unanswerable?",
                "evidence": ["D9:9"],
                "category": 5,
                "adversarial_answer": "x",
            },
        ],
    }


# ----------------------------------------------------------------------------- data


def test_session_dates_parse_to_utc_with_12_hour_clock() -> None:
    assert parse_session_datetime("1:56 pm on 8 May, 2023") == datetime(
        2023, 5, 8, 13, 56, tzinfo=UTC
    )
    assert parse_session_datetime("12:06 am on 11 November, 2023") == datetime(
        2023, 11, 11, 0, 6, tzinfo=UTC
    )
    assert parse_session_datetime("12:30 pm on 2 Jan, 2024").hour == 12
    with pytest.raises(ValueError):
        parse_session_datetime("yesterday")


def test_evidence_ids_are_repaired_and_unknown_ids_skipped() -> None:
    valid = {"D8:6", "D9:17", "D11:26", "D30:5"}
    assert normalize_evidence_id("D:11:26") == "D11:26"
    assert normalize_evidence_id("D30:05") == "D30:5"
    assert normalize_evidence_id("D") is None
    gold, skipped = repair_evidence(
        ["D8:6; D9:17", "D:11:26", "D30:05", "D", "D10:19", "D8:6"], valid
    )
    assert gold == ("D8:6", "D9:17", "D11:26", "D30:5")
    assert skipped == ("D", "D10:19")


def test_conversation_loads_turns_captions_observations_and_questions() -> None:
    conv = parse_conversation(synthetic_sample())
    assert [s.session_id for s in conv.sessions] == ["session_1", "session_2"]
    turns = {t.dia_id: t for t in conv.turns}
    assert turns["D1:3"].full_text == "Look at this. [shares a photo of a cat on a sofa]"
    assert turns["D2:1"].occurred_at == datetime(2023, 11, 11, 0, 6, tzinfo=UTC)
    assert turns["D1:1"].dated_text.startswith("[1:56 pm on 8 May, 2023] Ada: ")
    assert [o.dia_ids for o in conv.observations] == [("D1:1",), ("D1:2", "D2:1"), ("D2:2",)]
    golds = [q.gold for q in conv.questions]
    assert golds == [("D1:1",), ("D1:2", "D2:1"), ("D2:1",), ()]
    assert conv.questions[2].skipped_evidence == ("D",) and conv.questions[2].repaired
    assert conv.questions[3].qid == "syn-1#3"


def test_subset_keeps_only_questions_answerable_from_kept_sessions() -> None:
    conv = parse_conversation(synthetic_sample())
    small = subset([conv], max_sessions=1)[0]
    assert len(small.sessions) == 1
    assert [q.gold for q in small.questions] == [("D1:1",), ()]
    assert all(o.session_id == "session_1" for o in small.observations)
    assert len(subset([conv], max_questions=2)[0].questions) == 2


# ----------------------------------------------------------------------------- scoring


def test_recall_and_all_at_k_count_gold_covered_by_top_k_units() -> None:
    units = [frozenset({"D1:1"}), frozenset({"D2:1", "D1:2"}), frozenset({"D3:3"})]
    assert recall_at_k(units, ["D1:2", "D3:3"], 1) == 0.0
    assert recall_at_k(units, ["D1:2", "D3:3"], 2) == 0.5
    assert recall_at_k(units, ["D1:2", "D3:3"], 3) == 1.0
    assert not all_at_k(units, ["D1:2", "D3:3"], 2) and all_at_k(units, ["D1:2", "D3:3"], 3)
    assert recall_at_k(units, [], 20) == 0.0 and not all_at_k(units, [], 20)
    row = score_units(units, ["D1:1", "D9:9"])
    assert row == {"recall@5": 0.5, "recall@10": 0.5, "recall@20": 0.5, "all@20": 0.0}


def test_aggregate_pools_categories_one_to_four_and_reports_five_apart() -> None:
    rows = [
        {"category": 1, "recall@5": 1.0, "recall@10": 1.0, "recall@20": 1.0, "all@20": 1.0},
        {"category": 4, "recall@5": 0.0, "recall@10": 0.5, "recall@20": 1.0, "all@20": 1.0},
        {"category": 4, "recall@5": 0.0, "recall@10": 0.0, "recall@20": 0.0, "all@20": 0.0},
        {"category": 5, "recall@5": 1.0, "recall@10": 1.0, "recall@20": 1.0, "all@20": 1.0},
    ]
    table = aggregate(rows)
    assert table["single-hop"]["recall@10"] == pytest.approx(25.0)
    assert table["overall"]["n"] == 3 and table["overall"]["recall@10"] == pytest.approx(50.0)
    assert table["adversarial"]["n"] == 1 and table["adversarial"]["recall@5"] == 100.0
    assert math.isnan(table["temporal"]["recall@10"])


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0 and percentile(values, 95) == 95.0
    assert percentile([7.0], 95) == 7.0 and math.isnan(percentile([], 50))


def test_merge_by_score_interleaves_facts_and_events_deterministically() -> None:
    facts = [
        ScoredUnit(0.9, frozenset({"a"}), "fact"),
        ScoredUnit(0.5, frozenset({"b", "c"}), "fact"),
    ]
    events = [
        ScoredUnit(0.7, frozenset({"d"}), "event"),
        ScoredUnit(0.5, frozenset({"e"}), "event"),
    ]
    ids = [sorted(u) for u in merge_units(facts, events, "score")]
    assert ids == [["a"], ["d"], ["b", "c"], ["e"]]  # tie at 0.5: fact before event
    assert [sorted(u) for u in merge_units(facts, events[:1], "alternate")] == [
        ["a"],
        ["d"],
        ["b", "c"],
    ]
    assert merge_units(facts, events, "events") == [frozenset({"d"}), frozenset({"e"})]
    with pytest.raises(ValueError):
        merge_units(facts, events, "nope")


# ----------------------------------------------------------------------------- baselines


def test_rrf_sums_reciprocal_ranks_with_k_60() -> None:
    fused = rrf([["a", "b", "c"], ["c", "a", "d"]])
    # a: 1/61 + 1/62, c: 1/63 + 1/61, b: 1/62, d: 1/63
    assert fused == ["a", "c", "b", "d"]
    assert rrf([["x", "y"], ["y", "x"]]) == [
        "x",
        "y",
    ]  # exact tie: best single rank, then first seen
    assert rrf([["p"], ["q"]], k=0) == ["p", "q"]


def test_rank_by_scores_is_stable_on_ties() -> None:
    import numpy as np

    assert rank_by_scores(["a", "b", "c"], np.array([0.1, 0.5, 0.5])) == ["b", "c", "a"]


def test_bm25_and_dense_rank_the_matching_turn_first() -> None:
    conv = parse_conversation(synthetic_sample())
    ids = [t.dia_id for t in conv.turns]
    texts = [t.dated_text for t in conv.turns]
    assert BM25Index(ids, texts).rank("kayak lake")[0] == "D2:1"
    assert BM25Index(ids, texts).rank("the of and") == ids  # all stop words: document order
    embedder = HashEmbedder(384)
    dense = DenseIndex.build(ids, texts, embedder)
    assert dense.rank(embedder.embed_query("Pixel learned to open doors"))[0] == "D2:2"


def test_memo_embedder_encodes_each_text_once_with_the_same_vectors() -> None:
    inner = CountingHashEmbedder()
    memo = MemoEmbedder(inner)
    assert memo.model_id == inner.model_id and memo.dimensions == 384
    first = memo.embed(["a cat", "a dog", "a cat"])
    assert memo.embed(["a dog"]) == [first[1]] and first[0] == first[2]
    assert first == HashEmbedder(384).embed(["a cat", "a dog", "a cat"])
    assert memo.embed_query("cats?") == memo.embed_query("cats?")
    assert (inner.passages, inner.queries) == (2, 1)


# ----------------------------------------------------------------------------- references


def test_facts_cosine_ranks_subject_fact_units_covering_their_sources() -> None:
    facts = [
        StoredFact("f1", "Ada", "has a grey cat named Pixel", frozenset({"D1:1"})),
        StoredFact("f2", "Bo", "bought a kayak", frozenset({"D1:2", "D2:1"})),
    ]
    assert facts[1].unit_text == "Bo: bought a kayak"
    embedder = CountingHashEmbedder()
    index = FactsCosineIndex(facts, embedder)
    assert embedder.passages == 2  # each fact embedded once, on the passage side
    top = index.rank(embedder.embed_query("Bo kayak"), 20)
    assert top == [frozenset({"D1:2", "D2:1"}), frozenset({"D1:1"})]
    assert index.rank(embedder.embed_query("Bo kayak"), 1) == [frozenset({"D1:2", "D2:1"})]
    assert FactsCosineIndex([], embedder).rank(embedder.embed_query("anything"), 20) == []


def test_ablations_switch_each_stage_off_through_retrieve_overrides() -> None:
    from engramdb.services.retrieve.config import RetrieveConfig

    stages = [a.stage for a in ABLATIONS]
    assert stages[0] == FULL.stage and FULL.overrides == {}
    for stage in ("keyword", "graph", "spreading", "recency", "aggregation", "messages"):
        assert stage in stages
    assert "planner boosts" in stages
    base = {"topk_events": 20, "signal_weights": {"graph": 0.3}}
    for ablation in ABLATIONS:
        assert ablation.overrides is not None
        merged = merged_overrides(base, ablation.overrides)
        RetrieveConfig().with_overrides(merged)  # every switch is a valid override
    graph_off = merged_overrides(base, {"signal_weights": {"keyword": 0.0}})
    assert graph_off["signal_weights"] == {"graph": 0.3, "keyword": 0.0}  # merged, not replaced
    assert merged_overrides(base, {"topk_events": 0})["topk_events"] == 0


def test_ablation_table_reports_deltas_and_stages_without_a_switch() -> None:
    def summary(r10: float) -> dict[str, Any]:
        metrics = {"n": 1.0, "recall@5": r10, "recall@10": r10, "recall@20": r10, "all@20": r10}
        cats = ["multi-hop", "temporal", "open-domain", "single-hop", "overall", "adversarial"]
        return {"by_category": {c: dict(metrics) for c in cats}, "latency_ms": {"p50": 3.0}}

    lines = ablation_markdown(
        {
            "none": {"overrides": {}, "exact": True, "note": "all on", "summary": summary(60.0)},
            "graph": {"overrides": {"x": 1}, "exact": False, "note": "n", "summary": summary(55.5)},
            "magic": {"overrides": None, "exact": False, "note": "cannot be switched off"},
        }
    )
    table = "\n".join(lines)
    assert "| graph | 55.5 | 55.5 | -4.5 |" in table and "| partial |" in table
    assert "| magic |" in table and "no switch" in table
    assert ablation_markdown({}) == []


# ----------------------------------------------------------------------------- extractor


def _request(message_id: str, agent: str = "agent-syn") -> ExtractionInput:
    return ExtractionInput(
        agent_id=agent,
        message_id=message_id,
        text="(ignored)",
        occurred_at=datetime(2023, 5, 8, tzinfo=UTC),
    )


def test_observation_extractor_plays_back_facts_at_their_last_cited_turn() -> None:
    conv = parse_conversation(synthetic_sample())
    extractor = ObservationExtractor({"agent-syn": conv.observations})
    assert extractor.info.extractor == "observations"
    first = extractor.extract(_request("D1:1"))
    assert first.error is None and first.llm_calls == 0
    [fact] = first.extraction.facts
    assert (fact.text, fact.entity, fact.action) == (
        "Ada has a grey cat named Pixel.",
        "Ada",
        "NEW",
    )
    assert fact.confidence_level == ConfidenceLevel.explicit_statement
    assert fact.source_message_ids == ["D1:1"]
    assert [e.name for e in first.extraction.entities] == ["Ada"]
    assert extractor.extract(_request("D1:2")).extraction.facts == []  # cites D2:1 too: not yet
    [kayak] = extractor.extract(_request("D2:1")).extraction.facts
    assert kayak.entity == "Bo" and kayak.source_message_ids == ["D1:2", "D2:1"]
    assert extractor.extract(_request("D1:1", agent="someone-else")).extraction.facts == []


# ----------------------------------------------------------------------------- end to end


def test_baselines_only_run_writes_table_json_and_chart(tmp_path: Path) -> None:
    data = tmp_path / "syn.json"
    data.write_text(json.dumps([synthetic_sample()]), encoding="utf-8")
    out = tmp_path / "out"
    code = main(
        ["--data", str(data), "--out", str(out), "--embedder", "hash-bow-384", "--skip-engramdb"]
    )
    assert code == 0
    report = json.loads((out / "locomo-baselines.json").read_text())
    assert set(report["systems"]) == {"bm25", "dense", "hybrid-rrf"}
    assert report["meta"]["questions_scored"] == 3 and report["meta"]["questions_unscorable"] == 1
    bm25 = report["systems"]["bm25"]["by_category"]
    assert bm25["overall"]["n"] == 3 and bm25["overall"]["recall@20"] == 100.0  # 5 turns < 20
    assert "| bm25 |" in (out / "locomo-baselines.md").read_text()
    assert (out / "locomo-baselines-recall10.png").read_bytes()[:4] == b"\x89PNG"


def test_missing_data_file_is_a_clear_error(tmp_path: Path) -> None:
    assert main(["--data", str(tmp_path / "nope.json"), "--skip-engramdb"]) == 2


needs_data = pytest.mark.skipif(not DEFAULT_DATA.is_file(), reason="shared LoCoMo file absent")


@needs_data
def test_smoke_baselines_on_the_shared_dev_file(tmp_path: Path) -> None:
    code = main(
        ["--conversations", "1", "--sessions", "2", "--questions", "5", "--skip-engramdb"]
        + ["--embedder", "hash-bow-384", "--out", str(tmp_path)]
    )
    assert code == 0
    report = json.loads((tmp_path / "locomo-baselines.json").read_text())
    assert report["meta"]["conversations"] == 1 and 0 < report["meta"]["questions_scored"] <= 5
    assert report["systems"]["hybrid-rrf"]["by_category"]["overall"]["recall@20"] > 0


def _memory_available() -> bool:
    try:
        from engramdb.services.memory.facade import Memory  # noqa: F401
    except ImportError:
        return False
    return True


@needs_data
@pytest.mark.skipif(not _memory_available(), reason="engramdb.services.memory.facade not there yet")
def test_smoke_engramdb_observations_on_the_shared_dev_file(
    tmp_path: Path, pg_url: str, fresh_schema: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # its own schema: tables left in the session database's public schema change what other
    # tests see there (the pre-retrieval test expects no read model on its search path)
    schema, _env = fresh_schema("locomo_smoke")
    monkeypatch.setenv("ENGRAMDB_DB_SCHEMA", schema)
    code = main(
        ["--conversations", "1", "--sessions", "2", "--questions", "5", "--mode", "observations"]
        + ["--database-url", pg_url, "--out", str(tmp_path)]
    )
    assert code == 0
    report = json.loads((tmp_path / "locomo-observations.json").read_text())
    engram = report["systems"]["engramdb"]
    assert engram["ingest"]["extraction_errors"] == 0
    assert engram["by_category"]["overall"]["n"] == report["meta"]["questions_overall"] > 0
    assert engram["by_category"]["overall"]["recall@20"] > 0
    assert engram["latency_ms"]["p50"] > 0


def test_engramdb_run_adds_facts_cosine_and_the_ablation_table(
    tmp_path: Path, pg_url: str, fresh_schema: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end on the synthetic conversation (observations mode, hash embedder, its own
    schema): facts-cosine is scored beside the baselines, and ``--ablate`` asks every
    question again per stage over the same memory."""
    schema, _env = fresh_schema("locomo")
    monkeypatch.setenv("ENGRAMDB_DB_SCHEMA", schema)
    data = tmp_path / "syn.json"
    data.write_text(json.dumps([synthetic_sample()]), encoding="utf-8")
    out = tmp_path / "out"
    code = main(
        ["--data", str(data), "--out", str(out), "--embedder", "hash-bow-384"]
        + ["--database-url", pg_url, "--mode", "observations", "--ablate", "--jobs", "all"]
    )
    assert code == 0
    report = json.loads((out / "locomo-observations.json").read_text())
    systems = report["systems"]
    # --jobs: every job ran over the agent after its ingest (ADR-0030), none failed
    jobs = systems["engramdb"]["jobs"]
    assert list(jobs) == list(report["meta"]["jobs"]) and "profiles" in jobs
    assert all(entry["failed"] == 0 for entry in jobs.values()) and jobs["profiles"]["events"] > 0
    assert main(["--data", str(data), "--jobs", "nope", "--skip-engramdb"]) == 2
    assert {"engramdb", "bm25", "dense", "hybrid-rrf", "facts-cosine"} <= set(systems)
    facts_cosine = systems["facts-cosine"]
    assert facts_cosine["facts_indexed"] == 3  # the three observations, one unit each
    assert facts_cosine["by_category"]["overall"]["n"] == 3
    rows = {r["qid"]: r for r in facts_cosine["questions"]}
    assert rows["syn-1#0"]["recall@20"] == 1.0 and rows["syn-1#2"]["recall@20"] == 1.0
    # the kayak fact cites D1:2 and D2:1; the read model keeps the turn that completed it
    assert rows["syn-1#1"]["recall@20"] >= 0.5
    ingest = systems["engramdb"]["ingest"]  # the write path's per-message figures
    assert ingest["facts_extracted"] == 3 and ingest["llm_calls_per_message"] == 0
    assert ingest["valid_extractions"] == ingest["messages"] > 0
    assert ingest["extractor"].startswith("observations") and ingest["truncations"] == 0
    assert 0 < ingest["write_seconds"]["p50"] <= ingest["write_seconds"]["p95"]
    ablation = report["ablation"]
    assert list(ablation) == [a.stage for a in ABLATIONS]
    for stage, entry in ablation.items():
        assert entry["summary"]["by_category"]["overall"]["n"] == 3, stage
    assert ablation["keyword"]["questions_with_keyword_words"] == 0
    assert ablation["none"]["questions_with_keyword_words"] > 0
    markdown = (out / "locomo-observations.md").read_text()
    assert "| facts-cosine |" in markdown and "## Ablation" in markdown
    assert "| messages |" in markdown
    assert "Write path (`observations" in markdown


# ----------------------------------------------------------------------------- cross-validation


def _rows(conv: str, r10: list[float], category: int = 4, first: int = 0) -> list[dict[str, Any]]:
    """Hand-made per-question rows of one conversation, question ids ``conv#first…``."""
    return [
        {
            "qid": f"{conv}#{first + i}",
            "category": category,
            "recall@5": v,
            "recall@10": v,
            "recall@20": v,
            "all@20": v,
        }
        for i, v in enumerate(r10)
    ]


def test_cv_chooses_on_the_other_folds_and_scores_the_held_out_one_with_it() -> None:
    """A is best on c1–c4, B only on c5: with c5 held out, A is chosen (on c1–c4) and c5 is
    scored with A's rows — B's better c5 score must not leak into the headline."""
    convs = ["c1", "c2", "c3", "c4", "c5"]
    a = [r for c in convs for r in _rows(c, [0.0, 0.0] if c == "c5" else [1.0, 1.0])]
    b = [r for c in convs for r in _rows(c, [1.0, 1.0] if c == "c5" else [0.5, 0.5])]
    # category 5 never counts: B's perfect adversarial rows change nothing
    b += _rows("c1", [1.0] * 10, category=5, first=2)
    a += _rows("c1", [0.0] * 10, category=5, first=2)
    fold_of = {r["qid"]: r["qid"].split("#")[0] for r in a}
    folds = cross_validate({"A": a, "B": b}, fold_of)
    assert [f.held_out for f in folds] == convs
    assert [f.chosen for f in folds] == ["A"] * 5
    c5 = folds[-1]
    assert c5.train_objective == {"A": 1.0, "B": 0.5}
    assert c5.held_out_objective == {"A": 0.0, "B": 1.0}
    assert [r["recall@10"] for r in c5.held_out_rows if r["category"] == 4] == [0.0, 0.0]
    summary = cv_summary([Candidate("A", {}), Candidate("B", {"x": 1})], {"A": a, "B": b}, fold_of)
    held = summary["held_out"]["by_category"]
    assert held["overall"]["n"] == 10 and held["overall"]["recall@10"] == pytest.approx(80.0)
    assert held["adversarial"]["n"] == 10 and held["adversarial"]["recall@10"] == 0.0
    assert summary["in_sample"]["best"] == "A" and summary["in_sample"]["diagnostic_only"]
    assert [f["chosen"] for f in summary["folds"]] == ["A"] * 5
    assert [f["n_held_out"] for f in summary["folds"]] == [2] * 5


def test_cv_folds_may_choose_differently_and_pool_question_weighted() -> None:
    # A wins on c1 and c2, B on c3 (more questions): holding out c3 leaves A best; holding
    # out c1 or c2 leaves B best (B's 3 questions outweigh A's one-conversation lead).
    a = _rows("c1", [1.0]) + _rows("c2", [1.0]) + _rows("c3", [0.0, 0.0, 0.0])
    b = _rows("c1", [0.0]) + _rows("c2", [0.0]) + _rows("c3", [1.0, 1.0, 1.0])
    fold_of = {r["qid"]: r["qid"].split("#")[0] for r in a}
    folds = cross_validate({"A": a, "B": b}, fold_of)
    assert {f.held_out: f.chosen for f in folds} == {"c1": "B", "c2": "B", "c3": "A"}
    held = cv_summary([Candidate("A", {}), Candidate("B", {})], {"A": a, "B": b}, fold_of)
    assert held["held_out"]["by_category"]["overall"]["recall@10"] == 0.0  # every fold wrong
    assert held["in_sample"]["best"] == "B"  # 3/5 in-sample: the optimistic diagnostic


def test_cv_ties_go_to_the_first_candidate_in_the_grid() -> None:
    same = _rows("c1", [0.5, 1.0]) + _rows("c2", [0.25])
    fold_of = {r["qid"]: r["qid"].split("#")[0] for r in same}
    assert best_candidate({"default": same, "other": list(same)}) == "default"
    assert [f.chosen for f in cross_validate({"default": same, "other": same}, fold_of)] == [
        "default",
        "default",
    ]
    with pytest.raises(ValueError):
        cross_validate({"A": _rows("c1", [1.0])}, {"c1#0": "c1"})  # one fold is no CV


def test_cv_objective_recall_10_20_breaks_a_recall_10_tie_by_recall_20() -> None:
    """A candidate that only reorders ranks 11-20 ties the default on R@10; with
    ``recall@10+20`` its R@20 decides, and R@10 alone still keeps the default."""
    base = _rows("c1", [0.5, 0.5]) + _rows("c2", [0.5])
    tail = [dict(r, **{"recall@20": 1.0}) for r in base]
    fold_of = {r["qid"]: r["qid"].split("#")[0] for r in base}
    assert best_candidate({"default": base, "tail": tail}) == "default"
    assert best_candidate({"default": base, "tail": tail}, "recall@10+20") == "tail"
    assert objective(tail, "recall@10+20") == pytest.approx(0.75)
    summary = cv_summary([Candidate("default", {}), Candidate("tail", {})], {"default": base, "tail": tail},
                         fold_of, "recall@20")
    assert [f["chosen"] for f in summary["folds"]] == ["tail", "tail"]
    assert "recall@20" in summary["objective"]
    with pytest.raises(ValueError, match="objective"):
        objective(base, "ndcg")


def test_grid_is_validated_against_retrieve_config() -> None:
    grid = parse_grid(
        [
            {"name": "default", "config_overrides": {}},
            {"name": "kw", "config_overrides": {"signal_weights": {"keyword": 1.0}}},
            {"name": "bare"},
        ]
    )
    assert [c.name for c in grid] == ["default", "kw", "bare"] and grid[2].overrides == {}
    bad: list[Any] = [
        [],
        {"name": "x"},
        [{"name": "x", "config_overrides": {"topk_fact": 5}}],
        [{"name": "x", "config_overrides": {"signal_weights": {"keyword": 2.0}}}],
        [{"name": "x"}, {"name": "x"}],
        [{"name": "x", "overrides": {}}],
    ]
    for raw in bad:
        with pytest.raises(GridError):
            parse_grid(raw)
    committed = Path(__file__).resolve().parents[2] / "bench" / "locomo" / "grids" / "weights-v1.json"
    example = parse_grid(json.loads(committed.read_text()))
    assert example[0] == Candidate("default", {})


def test_cv_markdown_labels_held_out_headline_and_in_sample_diagnostic() -> None:
    a = _rows("c1", [1.0]) + _rows("c2", [0.5])
    fold_of = {r["qid"]: r["qid"].split("#")[0] for r in a}
    cv = cv_summary([Candidate("default", {})], {"default": a}, fold_of)
    bm25 = {"by_category": cv["held_out"]["by_category"]}
    text = cv_markdown(cv, {"bm25": bm25}, {"mode": "observations", "command": "x"})
    assert "## Held-out (headline)" in text and "| engramdb (cross-validated) | 2 |" in text
    assert "| bm25 | 2 |" in text and "diagnostic only" in text
    assert "| c2 | 1 | `default` |" in text


def test_cv_option_fails_fast_on_a_bad_grid_or_a_single_conversation(tmp_path: Path) -> None:
    data = tmp_path / "syn.json"
    data.write_text(json.dumps([synthetic_sample()]), encoding="utf-8")
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps([{"name": "x", "config_overrides": {"nope": 1}}]))
    assert main(["--data", str(data), "--cv", str(grid)]) == 2
    grid.write_text(json.dumps([{"name": "default"}]))
    assert main(["--data", str(data), "--cv", str(grid)]) == 2  # one conversation: no folds
    assert main(["--data", str(data), "--cv", str(grid), "--skip-engramdb"]) == 2


def test_cv_run_end_to_end_on_two_synthetic_conversations(
    tmp_path: Path, pg_url: str, fresh_schema: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--cv``: every grid candidate asked over the same memory, one fold per conversation,
    the held-out table beside the same-run references."""
    schema, _env = fresh_schema("locomo_cv")
    monkeypatch.setenv("ENGRAMDB_DB_SCHEMA", schema)
    data = tmp_path / "syn.json"
    data.write_text(json.dumps([synthetic_sample("syn-1"), synthetic_sample("syn-2")]))
    grid = tmp_path / "grid.json"
    grid.write_text(
        json.dumps(
            [
                {"name": "default", "config_overrides": {}},
                {"name": "facts-only", "config_overrides": {"topk_events": 0}},
            ]
        )
    )
    out = tmp_path / "out"
    code = main(
        ["--data", str(data), "--out", str(out), "--embedder", "hash-bow-384"]
        + ["--database-url", pg_url, "--mode", "observations", "--cv", str(grid)]
    )
    assert code == 0
    report = json.loads((out / "locomo-observations-cv.json").read_text())
    cv = report["cv"]
    assert [f["held_out"] for f in cv["folds"]] == ["syn-1", "syn-2"]
    assert all(f["chosen"] in {"default", "facts-only"} for f in cv["folds"])
    assert [f["n_held_out"] for f in cv["folds"]] == [3, 3]
    assert cv["held_out"]["by_category"]["overall"]["n"] == 6
    assert set(cv["candidates"]) == {"default", "facts-only"}
    assert len(cv["candidates"]["default"]["questions"]) == 6  # 3 scored per conversation
    assert {"bm25", "dense", "hybrid-rrf", "facts-cosine"} <= set(report["references"])
    assert report["meta"]["cv_grid"] == str(grid)
    markdown = (out / "locomo-observations-cv.md").read_text()
    assert "| engramdb (cross-validated) | 6 |" in markdown and "| facts-cosine | 6 |" in markdown
