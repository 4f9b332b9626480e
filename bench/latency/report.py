"""The retrieve latency bench's figures, honest about their own variance (pure functions).

Why a summary of runs rather than one number: on a shared 2-core box one pass of the same
code swings by 2x (ADR-0006), so each run's p50/p95 is kept, the headline is the median over
runs with its spread (min-max of the runs' p95), and every contender is also given as a
ratio to a baseline measured in the same runs (interleaved), which the load moves far less.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else float("nan")


@dataclass
class Run:
    """One pass of every query through one contender."""

    e2e_ms: list[float] = field(default_factory=list)  # wall time of the call, embedding included
    embed_ms: list[float] = field(default_factory=list)  # the query embedding alone
    stages: dict[str, list[float]] = field(default_factory=dict)  # trace timings per stage

    @property
    def p50(self) -> float:
        return percentile(self.e2e_ms, 50)

    @property
    def p95(self) -> float:
        return percentile(self.e2e_ms, 95)


@dataclass
class Summary:
    label: str
    p50: float  # median over runs of each run's p50
    p95: float  # median over runs of each run's p95
    p95_runs: list[float]
    p50_runs: list[float]
    embed_p50: float
    shares: dict[str, float]  # stage -> share of the summed stage time (embedding excluded)
    ratio_p50: float | None = None  # median over runs of p50 / baseline p50 of the same run
    ratio_p95: float | None = None

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.p95_runs), max(self.p95_runs)


def stage_shares(runs: Sequence[Run], skip: tuple[str, ...] = ("embed",)) -> dict[str, float]:
    """Mean time of each stage over all calls as a share of their sum. The embedding runs on
    its own thread beside the database stages, so it is reported apart, not as a share."""
    totals: dict[str, list[float]] = {}
    for run in runs:
        for stage, values in run.stages.items():
            if stage not in skip:
                totals.setdefault(stage, []).extend(values)
    means = {k: statistics.fmean(v) for k, v in totals.items() if v}
    whole = sum(means.values()) or 1.0
    return {k: v / whole for k, v in sorted(means.items(), key=lambda kv: -kv[1])}


def summarise(label: str, runs: Sequence[Run], baseline: Sequence[Run] | None = None) -> Summary:
    """Median over runs; with ``baseline`` (the same number of runs, interleaved), the ratios."""
    p50s = [r.p50 for r in runs]
    p95s = [r.p95 for r in runs]
    embeds = [v for r in runs for v in r.embed_ms]
    out = Summary(label, statistics.median(p50s), statistics.median(p95s), p95s, p50s,
                  percentile(embeds, 50) if embeds else float("nan"), stage_shares(runs))
    if baseline:
        out.ratio_p50 = statistics.median(r.p50 / b.p50 for r, b in zip(runs, baseline, strict=True))
        out.ratio_p95 = statistics.median(r.p95 / b.p95 for r, b in zip(runs, baseline, strict=True))
    return out


def agreement(a: Mapping[str, Sequence[str]], b: Mapping[str, Sequence[str]], k: int = 10) -> float:
    """Mean share of the top ``k`` ids two contenders agree on, over the queries both ran."""
    common = [q for q in a if q in b]
    if not common:
        return float("nan")
    shares = []
    for q in common:
        top_a, top_b = list(a[q])[:k], list(b[q])[:k]
        size = max(len(top_a), len(top_b))
        shares.append(1.0 if size == 0 else len(set(top_a) & set(top_b)) / size)
    return statistics.fmean(shares)


HEADER = (f"{'facts':>7} {'contender':>13} {'p50':>6} {'p95':>6} {'p95 of runs':>20} {'x base p50':>10}"
          f" {'x base p95':>10} {'embed p50':>9}  stage share (embedding apart)")


def row(size: int, s: Summary) -> str:
    runs = "/".join(f"{v:.0f}" for v in s.p95_runs)
    ratio50 = f"{s.ratio_p50:.2f}" if s.ratio_p50 is not None else "-"
    ratio95 = f"{s.ratio_p95:.2f}" if s.ratio_p95 is not None else "-"
    shares = ", ".join(f"{k} {100 * v:.0f}%" for k, v in s.shares.items() if v >= 0.03)
    return (f"{size:>7} {s.label[-13:]:>13} {s.p50:6.1f} {s.p95:6.1f} {runs:>20} {ratio50:>10}"
            f" {ratio95:>10} {s.embed_p50:9.1f}  {shares}")
