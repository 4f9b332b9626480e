"""``--ablate``: engramdb with each ranking stage switched off in turn, one table.

Why: a stage earns its place only if switching it off costs recall. The ablation reuses
the memory the run already ingested (ingest once, then every question once per variant),
so it costs retrieve time only, and every variant — including an all-on ``none`` row asked
in the same phase — sees exactly the same memory.

Each stage is switched off through retrieve's own ``config_overrides`` (the harness never
reaches into the pipeline). Not every stage has an override that removes it entirely;
``exact`` says whether the override is truly equivalent to the stage being absent, and
``note`` says what remains when it is not. A stage with no override at all would carry
``overrides=None`` and be reported as "no switch".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bench.locomo.data import CATEGORY_NAMES, SCORED_CATEGORIES


@dataclass(frozen=True)
class Ablation:
    stage: str
    overrides: dict[str, Any] | None  # None: retrieve has no switch for this stage
    exact: bool
    note: str

    @property
    def run_name(self) -> str:
        return f"engramdb-without[{self.stage}]"


FULL = Ablation("none", {}, True, "every stage on, asked in the ablation phase (the reference)")

# Read services/retrieve/pipeline.py, signals/, spreading_activation.py, rank.py for what each switches.
ABLATIONS: tuple[Ablation, ...] = (
    FULL,
    Ablation(
        "keyword",
        # keyword_max_words=0 still keeps one word (keyword_words appends before it checks
        # the cap), so no word reaches the keyword search only when every word is shorter
        # than 20 characters; the weight 0 removes any keyword score that would remain.
        {"keyword_min_word_len": 20, "signal_weights": {"keyword": 0.0}},
        True,
        "no keyword words → no keyword candidates for facts or messages, no keyword score",
    ),
    Ablation(
        "graph",
        {"signal_weights": {"graph": 0.0}},
        False,
        "partial: weight 0 removes the graph score, but the graph's candidates still join "
        "the pool (scored without it); no override stops graph candidate generation",
    ),
    Ablation(
        "spreading",
        {"spreading_activation_hops": 0},
        True,
        "no spreading activation (no candidates, no score)",
    ),
    Ablation(
        "recency",
        {"score_weights": {"recency": 0.0}},
        True,
        "score = relevance·0.70 + importance term; the graph's own edge-recency factor stays",
    ),
    Ablation(
        "aggregation",
        {"signal_weights": {"aggregation": 0.0}},
        False,
        "partial: weight 0 removes the aggregation score, but its candidates still join the "
        "pool; no override stops aggregation candidate generation",
    ),
    Ablation(
        "planner boosts",
        {"graph_query_bonus": 1.0, "broad_query_multiplier": 1},
        False,
        "no ×1.5 for entities named in the query, no broad-query graph budget; a broad "
        "query's graph cap becomes 1× pool (a plain query's is 2×)",
    ),
    Ablation(
        "messages",
        {"topk_events": 0},
        True,
        "no conversations (events) searched or returned: facts only",
    ),
)


def merged_overrides(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` on top; dict-valued keys merge, as ``with_overrides`` does, so
    an ablation never drops a weight the user overrode with ``--retrieve-overrides``."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def _fmt(x: float) -> str:
    return "—" if x != x else f"{x:.1f}"


def ablation_markdown(ablation: Mapping[str, dict[str, Any]]) -> list[str]:
    """One table: overall metrics, ΔR@10 against the all-on row, R@10 per category."""
    if not ablation:
        return []
    cats = [CATEGORY_NAMES[c] for c in SCORED_CATEGORIES] + [CATEGORY_NAMES[5]]
    full = ablation.get(FULL.stage)
    ref = full["summary"]["by_category"]["overall"]["recall@10"] if full else float("nan")
    lines = [
        "",
        "## Ablation (engramdb without one stage; same memory, same questions)",
        "",
        "| stage off | R@5 | R@10 | ΔR@10 | R@20 | All@20 | "
        + " | ".join(f"{c} R@10" for c in cats)
        + " | p50 ms | switch | exact |",
        "|---|" + "---:|" * (6 + len(cats)) + "---|---|",
    ]
    for stage, entry in ablation.items():
        switch = (
            "no switch" if entry["overrides"] is None else f"`{json.dumps(entry['overrides'])}`"
        )
        if entry["overrides"] is None:
            lines.append(
                f"| {stage} | " + " | ".join(["—"] * (6 + len(cats))) + f" | {switch} | — |"
            )
            continue
        summary = entry["summary"]
        by = summary["by_category"]
        o = by["overall"]
        delta = o["recall@10"] - ref
        lines.append(
            f"| {stage} | {_fmt(o['recall@5'])} | {_fmt(o['recall@10'])} | "
            f"{'—' if stage == FULL.stage else f'{delta:+.1f}'} | {_fmt(o['recall@20'])} | "
            f"{_fmt(o['all@20'])} | "
            + " | ".join(_fmt(by[c]["recall@10"]) for c in cats)
            + f" | {_fmt(summary.get('latency_ms', {}).get('p50', float('nan')))} | {switch} | "
            f"{'yes' if entry['exact'] else 'partial'} |"
        )
    lines += ["", "Notes:"]
    for stage, entry in ablation.items():
        left = entry.get("questions_with_keyword_words", 0)
        kept = (
            f" ({left} question(s) still had a keyword word)" if stage == "keyword" and left else ""
        )
        lines.append(f"- **{stage}**: {entry['note']}{kept}")
    return lines
