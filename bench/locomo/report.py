"""The LoCoMo run's outputs: the markdown tables and the Recall@10 chart.

Why apart from ``bench/locomo/run.py``: presentation only; nothing here touches data or
memory, and the harness module stays about scoring and running.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.locomo.data import CATEGORY_NAMES, SCORED_CATEGORIES
from bench.locomo.run import ENGRAMDB, REFERENCES, TOPK


def _fmt(x: float) -> str:
    return "—" if x != x else f"{x:.1f}"  # NaN → em dash


def markdown_report(
    summaries: dict[str, dict[str, Any]],
    meta: dict[str, Any],
    ablation: dict[str, dict[str, Any]] | None = None,
) -> str:
    from bench.locomo.ablate import ablation_markdown

    systems = [s for s in [ENGRAMDB, *REFERENCES] if s in summaries]
    diagnostics = [s for s in summaries if s not in systems]
    lines = [
        f"# LoCoMo retrieval — mode `{meta['mode']}`",
        "",
        f"Data: `{meta['data_name']}` — {meta['conversations']} conversation(s), "
        f"{meta['questions_scored']} scored questions (categories 1–4: {meta['questions_overall']}), "
        f"embedder `{meta['embedder']}`, engramdb merge `{meta['merge']}`, top-k {TOPK}, reranker off"
        + (
            f", overrides `{json.dumps(meta['retrieve_overrides'])}`"
            if meta.get("retrieve_overrides")
            else ""
        )
        + ".",
        "",
        "## Overall (categories 1–4)",
        "",
        "| system | n | R@5 | R@10 | R@20 | All@20 | ctx tokens/query | p50 ms | p95 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in systems + diagnostics:
        s = summaries[name]
        o = s["by_category"]["overall"]
        lat = s.get("latency_ms", {})
        ctx = s.get("context_tokens", {})
        lines.append(
            f"| {name} | {int(o['n'])} | {_fmt(o['recall@5'])} | {_fmt(o['recall@10'])} | "
            f"{_fmt(o['recall@20'])} | {_fmt(o['all@20'])} | {_fmt(ctx.get('mean', float('nan')))} | "
            f"{_fmt(lat.get('p50', float('nan')))} | {_fmt(lat.get('p95', float('nan')))} |"
        )
    cats = [CATEGORY_NAMES[c] for c in SCORED_CATEGORIES] + ["overall", CATEGORY_NAMES[5]]
    lines += [
        "",
        "## Recall@10 by category",
        "",
        "| system | " + " | ".join(cats) + " |",
        "|---|" + "---:|" * len(cats),
    ]
    for name in systems:
        by = summaries[name]["by_category"]
        lines.append(f"| {name} | " + " | ".join(_fmt(by[c]["recall@10"]) for c in cats) + " |")
    lines += [
        "",
        "## Every metric by category",
        "",
        "| category | system | n | R@5 | R@10 | R@20 | All@20 |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for cat in cats:
        for name in systems:
            r = summaries[name]["by_category"][cat]
            lines.append(
                f"| {cat} | {name} | {int(r['n'])} | {_fmt(r['recall@5'])} | {_fmt(r['recall@10'])} | "
                f"{_fmt(r['recall@20'])} | {_fmt(r['all@20'])} |"
            )
    if ENGRAMDB in summaries and "ingest" in summaries[ENGRAMDB]:
        ing = summaries[ENGRAMDB]["ingest"]
        mu = summaries[ENGRAMDB].get("mean_units_returned", {})
        lines += [
            "",
            f"engramdb ingest: {ing['messages']} messages in {ing['seconds']} s, "
            f"{ing['decisions']} decisions, {ing['extraction_errors']} extraction errors, "
            f"{ing['duplicates']} duplicates; "
            f"mean units returned per query: {mu.get('facts', 0):.1f} facts, {mu.get('events', 0):.1f} events.",
        ]
        if "write_seconds" in ing:
            ws = ing["write_seconds"]
            lines += [
                "",
                f"Write path (`{ing['extractor']}`): {ing['valid_extractions']}/{ing['messages']} "
                f"valid extractions (no error), {ing['facts_per_message']:.2f} facts/message, "
                f"{ing['llm_calls_per_message']:.2f} LLM calls/message, "
                f"{ing['truncations']} truncated; seconds/message p50 {ws['p50']:.2f}, "
                f"p95 {ws['p95']:.2f}; errors by kind {json.dumps(ing['errors_by_kind'])}.",
            ]
    lines += ablation_markdown(ablation or {})
    lines += [
        "",
        f"Evidence: {meta['evidence_repaired']} question(s) had malformed ids repaired, "
        f"{meta['evidence_skipped']} id(s) naming no turn were skipped, "
        f"{meta['questions_unscorable']} question(s) without any valid id were not scored.",
        "",
        f"Command: `{meta['command']}`",
        "",
    ]
    return "\n".join(lines)


def recall10_chart(summaries: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = [s for s in [ENGRAMDB, *REFERENCES] if s in summaries]
    cats = [CATEGORY_NAMES[c] for c in SCORED_CATEGORIES] + ["overall"]
    width = 0.8 / max(1, len(systems))
    fig, ax = plt.subplots(figsize=(9, 4.5), dpi=110)
    for i, name in enumerate(systems):
        values = [summaries[name]["by_category"][c]["recall@10"] for c in cats]
        xs = [j + (i - (len(systems) - 1) / 2) * width for j in range(len(cats))]
        bars = ax.bar(xs, [0 if v != v else v for v in values], width, label=name)
        ax.bar_label(bars, labels=[_fmt(v) for v in values], fontsize=7, padding=1)
    ax.set_xticks(range(len(cats)), cats)
    ax.set_ylabel("evidence Recall@10 (%)")
    ax.set_ylim(0, 100)
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8, ncols=len(systems))
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
