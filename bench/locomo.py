"""LoCoMo retrieval-quality benchmark: engramdb vs raw-turn BM25 / dense / hybrid baselines.

What it measures: for each question, which share of the gold evidence turns (``dia_id``)
the top-k retrieved units cover. One agent per conversation; every session is written in
order through the real write pipeline (``Memory.write``), then every question is asked of
``Memory.retrieve`` with the reranker off. See ``docs/benchmarks.md`` for the method, the
figures and the command that reproduces them.

Units and merge: engramdb returns facts (each covering its ``source_message_ids``) and
conversations/events (each covering its ``message_id``) in two lists with their own
scores. They are merged into one ranked list *by score* (``--merge score``, the default:
both scores are the retrieve's final score for that unit, so sorting them together is
the ranking retrieve itself implies; ties keep facts first). ``--merge alternate``
(fact 1, event 1, fact 2, …) and fact-only / event-only rankings are also scored and
kept in the JSON as diagnostics.

Outputs (in ``--out``): ``locomo-<mode>.md`` (tables), ``locomo-<mode>.json`` (config,
aggregates, per-question scores keyed by question id — never dataset text) and
``locomo-<mode>-recall10.png`` (Recall@10 by category).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.locomo_data import (
    CATEGORY_NAMES,
    SCORED_CATEGORIES,
    Conversation,
    Question,
    load_locomo,
    subset,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "bench" / "locomo" / "locomo-dev.json"
DEFAULT_OUT = REPO_ROOT / "bench" / "results"
KS = (5, 10, 20)
TOPK = 20
ENGRAMDB = "engramdb"
BASELINES = ("bm25", "dense", "hybrid-rrf")
FACTS_COSINE = "facts-cosine"  # cosine over engramdb's own stored facts (bench/locomo_facts.py)
REFERENCES = (*BASELINES, FACTS_COSINE)
MERGES = ("score", "alternate", "facts", "events")

Unit = frozenset[str]  # the message ids (dia_ids) one retrieved unit covers


# ----------------------------------------------------------------------------- scoring


def covered(units: Sequence[Unit], k: int) -> set[str]:
    out: set[str] = set()
    for unit in units[:k]:
        out |= unit
    return out


def recall_at_k(units: Sequence[Unit], gold: Sequence[str], k: int) -> float:
    """Share of the gold ids covered by the union of the top-k units (0 if no gold)."""
    if not gold:
        return 0.0
    hit = covered(units, k)
    return sum(1 for g in set(gold) if g in hit) / len(set(gold))


def all_at_k(units: Sequence[Unit], gold: Sequence[str], k: int) -> bool:
    return bool(gold) and set(gold) <= covered(units, k)


def score_units(units: Sequence[Unit], gold: Sequence[str]) -> dict[str, float]:
    row = {f"recall@{k}": recall_at_k(units, gold, k) for k in KS}
    row["all@20"] = 1.0 if all_at_k(units, gold, 20) else 0.0
    return row


def aggregate(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per category, ``overall`` (categories 1–4 pooled, question-weighted) and
    ``adversarial`` (category 5): means of each metric, in percent, with ``n``."""

    def summarise(selected: list[dict[str, Any]]) -> dict[str, float]:
        out: dict[str, float] = {"n": float(len(selected))}
        for metric in [f"recall@{k}" for k in KS] + ["all@20"]:
            out[metric] = (
                100.0 * statistics.fmean(r[metric] for r in selected) if selected else float("nan")
            )
        return out

    table: dict[str, dict[str, float]] = {}
    for category in SCORED_CATEGORIES:
        table[CATEGORY_NAMES[category]] = summarise([r for r in rows if r["category"] == category])
    table["overall"] = summarise([r for r in rows if r["category"] in SCORED_CATEGORIES])
    table[CATEGORY_NAMES[5]] = summarise([r for r in rows if r["category"] == 5])
    return table


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0–100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, math.ceil(q / 100.0 * len(ordered)) - 1))
    return ordered[index]


# ----------------------------------------------------------------------------- merging


@dataclass(frozen=True)
class ScoredUnit:
    score: float
    ids: Unit
    kind: str  # "fact" | "event"


def merge_units(facts: Sequence[ScoredUnit], events: Sequence[ScoredUnit], how: str) -> list[Unit]:
    """One ranked list from retrieve's two (each already best first)."""
    if how == "facts":
        return [u.ids for u in facts]
    if how == "events":
        return [u.ids for u in events]
    if how == "alternate":
        out: list[Unit] = []
        for i in range(max(len(facts), len(events))):
            out.extend(u.ids for u in [*facts[i : i + 1], *events[i : i + 1]])
        return out
    if how == "score":
        tagged = [(u.score, 0, i, u) for i, u in enumerate(facts)]
        tagged += [(u.score, 1, i, u) for i, u in enumerate(events)]
        tagged.sort(key=lambda t: (-t[0], t[1], t[2]))
        return [t[3].ids for t in tagged]
    raise ValueError(f"unknown merge {how!r}; expected one of {', '.join(MERGES)}")


def units_from_result(result: Any) -> tuple[list[ScoredUnit], list[ScoredUnit]]:
    """Facts cover ``source_message_ids``; events cover their ``message_id``."""
    facts: list[ScoredUnit] = []
    for fact in getattr(result, "facts", None) or []:
        ids = getattr(fact, "source_message_ids", None)
        if ids is None:
            single = getattr(fact, "source_message_id", None)
            ids = [single] if single else []
        facts.append(
            ScoredUnit(float(getattr(fact, "score", 0.0)), frozenset(map(str, ids)), "fact")
        )
    events: list[ScoredUnit] = []
    for event in getattr(result, "events", None) or []:
        mid = getattr(event, "message_id", None)
        events.append(
            ScoredUnit(
                float(getattr(event, "score", 0.0)),
                frozenset([str(mid)] if mid else []),
                "event",
            )
        )
    return facts, events


# ----------------------------------------------------------------------------- runs


class MemoEmbedder:
    """The run's embedder with an in-process memo per (kind, text).

    Why: the dense baseline and engramdb's retrieve embed the very same question text
    (and the planner may embed it more than once); on a 2-core machine each avoided
    encoding is ~20–40 ms. Same ``model_id`` and vectors as the wrapped provider, so the
    projections' persistent (model, text) cache stays consistent; every other attribute
    (``similarity_floor``, ``threads``…) is delegated.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimensions = inner.dimensions
        self.similarity_floor = inner.similarity_floor
        self._passages: dict[str, list[float]] = {}
        self._queries: dict[str, list[float]] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        items = list(texts)
        missing = list(dict.fromkeys(t for t in items if t not in self._passages))
        if missing:
            self._passages.update(zip(missing, self.inner.embed(missing), strict=True))
        return [self._passages[t] for t in items]

    def embed_query(self, text: str) -> list[float]:
        if text not in self._queries:
            self._queries[text] = self.inner.embed_query(text)
        return self._queries[text]


@dataclass
class SystemRun:
    name: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    context_tokens: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def add(self, question: Question, units: Sequence[Unit]) -> None:
        row: dict[str, Any] = {"qid": question.qid, "category": question.category}
        row.update(score_units(units, question.gold))
        self.rows.append(row)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"by_category": aggregate(self.rows)}
        if self.latencies_ms:
            out["latency_ms"] = {
                "p50": percentile(self.latencies_ms, 50),
                "p95": percentile(self.latencies_ms, 95),
                "mean": statistics.fmean(self.latencies_ms),
            }
        if self.context_tokens:
            out["context_tokens"] = {
                "mean": statistics.fmean(self.context_tokens),
                "p50": percentile(self.context_tokens, 50),
                "p95": percentile(self.context_tokens, 95),
            }
        out.update(self.extra)
        out["questions"] = self.rows
        return out


def scorable(conv: Conversation) -> list[Question]:
    """Questions with at least one gold id that names a turn (others cannot be scored)."""
    return [q for q in conv.questions if q.gold]


def log(message: str) -> None:
    print(f"[locomo {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_baselines(conversations: Sequence[Conversation], embedder: Any) -> dict[str, SystemRun]:
    from bench.locomo_baselines import BM25Index, DenseIndex, rrf, stemmer_name

    runs = {name: SystemRun(name) for name in BASELINES}
    embed_s = 0.0
    n_turns = 0
    for conv in conversations:
        turns = conv.turns
        ids = [t.dia_id for t in turns]
        texts = [t.dated_text for t in turns]
        n_turns += len(turns)
        bm25 = BM25Index(ids, texts)
        start = time.perf_counter()
        dense = DenseIndex.build(ids, texts, embedder)
        embed_s += time.perf_counter() - start
        for q in scorable(conv):
            t0 = time.perf_counter()
            r_bm25 = bm25.rank(q.question)
            t1 = time.perf_counter()
            r_dense = dense.rank(embedder.embed_query(q.question))
            t2 = time.perf_counter()
            r_hybrid = rrf([r_bm25, r_dense])
            t3 = time.perf_counter()
            for name, ranking, ms in (
                ("bm25", r_bm25, (t1 - t0) * 1000),
                ("dense", r_dense, (t2 - t1) * 1000),
                ("hybrid-rrf", r_hybrid, (t3 - t0) * 1000),
            ):
                runs[name].add(q, [frozenset([d]) for d in ranking[:TOPK]])
                runs[name].latencies_ms.append(ms)
        log(
            f"baselines: {conv.sample_id} done ({len(turns)} turns, {embed_s:.0f}s embedding so far)"
        )
    for run in runs.values():
        run.extra["turns_indexed"] = n_turns
    runs["bm25"].extra["stemmer"] = stemmer_name()
    runs["dense"].extra["embed_seconds"] = round(embed_s, 1)
    return runs


def ingest_conversation(
    memory: Any, conv: Conversation, agent_id: str, ingest: dict[str, Any]
) -> float:
    """Write every turn of ``conv`` in order as ``agent_id`` and wait for the read models;
    adds to the ``ingest`` counters and returns the seconds it took."""
    position: int | None = None
    start = time.perf_counter()
    for session in conv.sessions:
        for turn in session.turns:
            result = memory.write(
                agent_id,
                turn.full_text,
                speaker=turn.speaker,
                session_id=session.session_id,
                occurred_at=session.occurred_at,
                message_id=turn.dia_id,
                metadata={"benchmark": "locomo", "sample_id": conv.sample_id},
            )
            position = max(position or 0, int(getattr(result, "position", 0) or 0))
            ingest["messages"] += 1
            ingest["duplicates"] += int(bool(getattr(result, "duplicate", False)))
            ingest["extraction_errors"] += int(bool(getattr(result, "extraction_error", None)))
            ingest["decisions"] += len(getattr(result, "decisions", None) or [])
    memory.wait_for_projections(position, timeout=900.0)
    elapsed = time.perf_counter() - start
    ingest["seconds"] += elapsed
    return elapsed


def run_facts_cosine(
    memory: Any, conv: Conversation, agent_id: str, embedder: Any, run: SystemRun
) -> int:
    """The ``facts-cosine`` reference for one ingested conversation; returns its fact count."""
    from bench.locomo_facts import FactsCosineIndex, stored_facts

    index = FactsCosineIndex(stored_facts(memory, agent_id), embedder)
    for q in scorable(conv):
        t0 = time.perf_counter()
        units = index.rank(embedder.embed_query(q.question), TOPK)
        run.add(q, units)
        run.latencies_ms.append((time.perf_counter() - t0) * 1000.0)
    return len(index.facts)


def run_ablation(
    conversations: Sequence[Conversation],
    memory: Any,
    agent_ids: dict[str, str],
    *,
    merge: str,
    base_overrides: dict[str, Any],
    on_progress: Callable[[str], None] = log,
) -> dict[str, dict[str, Any]]:
    """Every question once per ablation variant, over the already ingested agents."""
    from bench.locomo_ablate import ABLATIONS, merged_overrides

    out: dict[str, dict[str, Any]] = {}
    for ablation in ABLATIONS:
        entry: dict[str, Any] = {
            "overrides": ablation.overrides,
            "exact": ablation.exact,
            "note": ablation.note,
        }
        out[ablation.stage] = entry
        if ablation.overrides is None:
            continue
        overrides = merged_overrides(base_overrides, ablation.overrides)
        run = SystemRun(ablation.run_name)
        with_words = 0
        start = time.perf_counter()
        for conv in conversations:
            for q in scorable(conv):
                t0 = time.perf_counter()
                result = memory.retrieve(
                    agent_ids[conv.sample_id], q.question, config_overrides=overrides
                )
                run.latencies_ms.append((time.perf_counter() - t0) * 1000.0)
                run.context_tokens.append(len(getattr(result, "context", "") or "") / 4.0)
                with_words += bool((getattr(result, "trace", None) or {}).get("keyword_words"))
                run.add(q, merge_units(*units_from_result(result), merge)[:TOPK])
        entry["questions_with_keyword_words"] = with_words
        entry["summary"] = run.summary()
        on_progress(
            f"ablation: without {ablation.stage}: R@10 "
            f"{entry['summary']['by_category']['overall']['recall@10']:.1f} "
            f"({time.perf_counter() - start:.0f}s)"
        )
    return out


def run_engramdb(
    conversations: Sequence[Conversation],
    memory: Any,
    *,
    run_id: str,
    merge: str,
    retrieve_overrides: dict[str, Any] | None = None,
    embedder: Any = None,
    ablate: bool = False,
    on_progress: Callable[[str], None] = log,
) -> tuple[dict[str, SystemRun], dict[str, dict[str, Any]]]:
    """Ingest each conversation as one agent, then ask its questions. Returns the headline
    run (``engramdb``, merged with ``merge``), one diagnostic run per other merge and, with
    ``embedder``, the ``facts-cosine`` reference over the same stored facts; plus, with
    ``ablate``, the ablation table's entries (asked after every conversation is in)."""
    runs = {m: SystemRun(ENGRAMDB if m == merge else f"{ENGRAMDB}[{m}]") for m in MERGES}
    headline = runs[merge]
    facts_cosine = SystemRun(FACTS_COSINE) if embedder is not None else None
    overrides: dict[str, Any] = {"topk_facts": TOPK, "topk_events": TOPK, "enable_reranker": False}
    overrides.update(retrieve_overrides or {})
    ingest: dict[str, Any] = {
        "messages": 0,
        "seconds": 0.0,
        "extraction_errors": 0,
        "duplicates": 0,
        "decisions": 0,
    }
    units_seen = {"facts": 0, "events": 0, "queries": 0}
    agent_ids: dict[str, str] = {}
    n_facts = 0
    for conv in conversations:
        agent_id = agent_ids[conv.sample_id] = f"locomo-{conv.sample_id}-{run_id}"
        elapsed = ingest_conversation(memory, conv, agent_id, ingest)
        on_progress(
            f"engramdb: {conv.sample_id} ingested {len(conv.turns)} turns in {elapsed:.0f}s; asking "
            f"{len(scorable(conv))} questions"
        )
        for q in scorable(conv):
            t0 = time.perf_counter()
            result = memory.retrieve(agent_id, q.question, config_overrides=overrides)
            latency = (time.perf_counter() - t0) * 1000.0
            facts, events = units_from_result(result)
            units_seen["facts"] += len(facts)
            units_seen["events"] += len(events)
            units_seen["queries"] += 1
            tokens = len(getattr(result, "context", "") or "") / 4.0
            for how, run in runs.items():
                run.add(q, merge_units(facts, events, how)[:TOPK])
                run.latencies_ms.append(latency)
                run.context_tokens.append(tokens)
        if facts_cosine is not None:
            n_facts += run_facts_cosine(memory, conv, agent_id, embedder, facts_cosine)
    ingest["seconds"] = round(ingest["seconds"], 1)
    n_queries = max(1, units_seen["queries"])
    headline.extra["ingest"] = ingest
    headline.extra["mean_units_returned"] = {
        "facts": units_seen["facts"] / n_queries,
        "events": units_seen["events"] / n_queries,
    }
    if facts_cosine is not None:
        facts_cosine.extra["facts_indexed"] = n_facts
        runs[FACTS_COSINE] = facts_cosine
    ablation = (
        run_ablation(
            conversations,
            memory,
            agent_ids,
            merge=merge,
            base_overrides=overrides,
            on_progress=on_progress,
        )
        if ablate
        else {}
    )
    return runs, ablation


# ----------------------------------------------------------------------------- outputs


def _fmt(x: float) -> str:
    return "—" if x != x else f"{x:.1f}"  # NaN → em dash


def markdown_report(
    summaries: dict[str, dict[str, Any]],
    meta: dict[str, Any],
    ablation: dict[str, dict[str, Any]] | None = None,
) -> str:
    from bench.locomo_ablate import ablation_markdown

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


# ----------------------------------------------------------------------------- CLI


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="engramdb bench locomo",
        description="LoCoMo evidence-retrieval benchmark: engramdb vs BM25 / dense / hybrid baselines.",
    )
    p.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help="LoCoMo JSON (default: %(default)s)"
    )
    p.add_argument("--conversations", type=int, default=None, help="only the first N conversations")
    p.add_argument("--sessions", type=int, default=None, help="only the first N sessions of each")
    p.add_argument("--questions", type=int, default=None, help="only the first N questions of each")
    p.add_argument(
        "--mode",
        choices=("observations", "configured"),
        default="observations",
        help="extractor: the dataset's own observations, or whatever is configured (LLM / rule-based)",
    )
    p.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="output dir (default: %(default)s)"
    )
    p.add_argument("--embedder", default=None, help="embedding model id (default: settings)")
    p.add_argument("--threads", type=int, default=None, help="embedder threads (default: settings)")
    p.add_argument(
        "--merge", choices=MERGES, default="score", help="how engramdb facts+events are ranked"
    )
    p.add_argument(
        "--retrieve-overrides",
        type=json.loads,
        default=None,
        metavar="JSON",
        help="extra retrieve config_overrides, e.g. '{\"recency_half_life_days\": 365}'",
    )
    p.add_argument(
        "--ablate",
        action="store_true",
        help="also ask every question once per engramdb stage switched off (same memory)",
    )
    p.add_argument("--skip-engramdb", action="store_true", help="baselines only")
    p.add_argument("--skip-baselines", action="store_true", help="engramdb only")
    p.add_argument(
        "--database-url", default=None, help="external PostgreSQL (default: throwaway embedded)"
    )
    p.add_argument(
        "--data-dir", type=Path, default=None, help="embedded servers' dir (default: temp, removed)"
    )
    return p


def _settings(args: argparse.Namespace, data_dir: Path | None) -> Any:
    from engramdb.infra.settings import Settings

    overrides: dict[str, Any] = {}
    if args.embedder:
        overrides["embedding_model"] = args.embedder
    if args.threads:
        overrides["embedding_threads"] = args.threads
    if args.database_url:
        overrides["database_url"] = args.database_url
    if data_dir is not None:
        overrides["data_dir"] = data_dir
    return Settings(**overrides)


def _open_memory(settings: Any, embedder: Any, extractor: Any) -> Any:
    """Observations mode runs with no LLM at all (entity resolution included), so it is
    deterministic and offline; configured mode uses whatever the settings configure."""
    from engramdb.services.memory import Memory

    if extractor is not None:
        return Memory.open(settings, llm=None, embedder=embedder, extractor=extractor)
    return Memory.open(settings, embedder=embedder)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    args = build_parser().parse_args(argv)
    if not args.data.is_file():
        print(f"LoCoMo data not found: {args.data} (pass --data PATH)", file=sys.stderr)
        return 2
    if args.skip_engramdb and args.skip_baselines:
        print("nothing to run: both --skip-engramdb and --skip-baselines given", file=sys.stderr)
        return 2
    everything = load_locomo(args.data)
    conversations = subset(
        everything,
        max_conversations=args.conversations,
        max_sessions=args.sessions,
        max_questions=args.questions,
    )
    questions = [q for c in conversations for q in c.questions]
    scored = [q for q in questions if q.gold]

    temp_dir: Path | None = None
    data_dir = args.data_dir
    if (
        data_dir is None
        and not args.skip_engramdb
        and not args.database_url
        and not os.environ.get("ENGRAMDB_DATABASE_URL")
    ):
        # A throwaway embedded server: a benchmark must neither read nor pollute real memory.
        temp_dir = data_dir = Path(tempfile.mkdtemp(prefix="engramdb-locomo-", dir="/tmp"))
    settings = _settings(args, data_dir)

    from engramdb.infra.providers.factory import make_embedder

    embedder = MemoEmbedder(make_embedder(settings))
    run_id = datetime.now(UTC).strftime("%Y%m%d%H%M%S") + "-" + uuid.uuid4().hex[:6]
    summaries: dict[str, dict[str, Any]] = {}
    ablation: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    try:
        if not args.skip_baselines:
            for name, run in run_baselines(conversations, embedder).items():
                summaries[name] = run.summary()
        if not args.skip_engramdb:
            extractor = None
            if args.mode == "observations":
                from bench.locomo_observations import ObservationExtractor

                extractor = ObservationExtractor(
                    {f"locomo-{c.sample_id}-{run_id}": c.observations for c in conversations}
                )
            memory = _open_memory(settings, embedder, extractor)
            try:
                runs, ablation = run_engramdb(
                    conversations,
                    memory,
                    run_id=run_id,
                    merge=args.merge,
                    retrieve_overrides=args.retrieve_overrides,
                    embedder=None if args.skip_baselines else embedder,
                    ablate=args.ablate,
                )
            finally:
                memory.close()
            for run in runs.values():
                summaries[run.name] = run.summary()
    finally:
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)

    total_s = time.perf_counter() - started
    stem = "locomo-baselines" if args.skip_engramdb else f"locomo-{args.mode}"
    meta = {
        "mode": "baselines only" if args.skip_engramdb else args.mode,
        "data_name": args.data.name,
        "conversations": len(conversations),
        "questions_scored": len(scored),
        "questions_overall": sum(1 for q in scored if q.category in SCORED_CATEGORIES),
        "questions_unscorable": len(questions) - len(scored),
        "evidence_repaired": sum(1 for q in questions if q.repaired),
        "evidence_skipped": sum(len(q.skipped_evidence) for q in questions),
        "embedder": getattr(embedder, "model_id", type(embedder).__name__),
        "merge": args.merge,
        "topk": TOPK,
        "retrieve_overrides": args.retrieve_overrides or {},
        "ablate": bool(args.ablate),
        "seconds": round(total_s, 1),
        "run_id": run_id,
        "command": "engramdb bench locomo " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    report = markdown_report(summaries, meta, ablation)
    (out / f"{stem}.md").write_text(report, encoding="utf-8")
    payload: dict[str, Any] = {"meta": meta, "systems": summaries}
    if ablation:
        payload["ablation"] = ablation
    (out / f"{stem}.json").write_text(
        json.dumps(payload, indent=2, allow_nan=True), encoding="utf-8"
    )
    recall10_chart(
        summaries, out / f"{stem}-recall10.png", f"LoCoMo evidence Recall@10 ({meta['mode']})"
    )
    print(report)
    log(f"done in {total_s:.0f}s; wrote {out / stem}.{{md,json}} and -recall10.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
