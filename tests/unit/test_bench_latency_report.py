"""The retrieve latency bench's summary (bench/latency/report.py): medians over runs, the
spread, ratios to the baseline run by run, stage shares without the embedding, agreement."""

from __future__ import annotations

import pytest

from bench.latency.report import Run, agreement, row, stage_shares, summarise


def run(values: list[float], stages: dict[str, list[float]] | None = None) -> Run:
    return Run(e2e_ms=values, embed_ms=[1.0] * len(values), stages=stages or {})


def test_median_over_runs_spread_and_per_run_ratio() -> None:
    runs = [run([10.0] * 20), run([30.0] * 20), run([20.0] * 20)]
    base = [run([5.0] * 20), run([10.0] * 20), run([20.0] * 20)]
    s = summarise("x", runs, base)
    assert (s.p50, s.p95) == (20.0, 20.0)
    assert s.spread == (10.0, 30.0)
    assert s.ratio_p95 == pytest.approx(2.0)  # ratios 2, 3, 1 -> median 2 (not 20/10)
    assert summarise("b", base).ratio_p95 is None
    assert "10/30/20" in row(1000, s)


def test_stage_shares_leave_the_embedding_apart() -> None:
    shares = stage_shares([run([1.0], {"embed": [100.0], "keyword": [3.0], "events": [1.0]})])
    assert shares == {"keyword": 0.75, "events": 0.25}


def test_agreement_of_top_k() -> None:
    assert agreement({"q": ["a", "b"]}, {"q": ["b", "a"]}) == 1.0
    assert agreement({"q": ["a", "b"], "r": []}, {"q": ["a", "c"], "r": []}) == 0.75
    assert agreement({"q": list("abcdefghijk")}, {"q": list("abcdefghijz")}, k=10) == 1.0
