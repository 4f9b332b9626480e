"""LoCoMo retrieval-quality benchmark: engramdb vs raw-turn BM25 / dense / hybrid baselines
and the ``facts-cosine`` reference (plain cosine over the facts engramdb stored).

What it measures: for each question, which share of the gold evidence turns (``dia_id``)
the top-k retrieved units cover. One agent per conversation; every session is written in
order through the real write pipeline (``Memory.write``), then every question is asked of
``Memory.retrieve`` with the reranker off. See ``docs/benchmarks.md`` for the
figures and the command that reproduces them, ``docs/benchmarks-log.md`` for the method.

Units and merge: engramdb returns facts (each covering its ``source_message_ids``) and
conversations/events (each covering its ``message_id``) in two lists with their own
scores. They are merged into one ranked list *by score* (``--merge score``, the default:
both scores are the retrieve's final score for that unit, so sorting them together is
the ranking retrieve itself implies; ties keep facts first). ``--merge alternate``
(fact 1, event 1, fact 2, …) and fact-only / event-only rankings are also scored and
kept in the JSON as diagnostics.

``--ablate`` adds one table: engramdb with each retrieve stage switched off in turn, over
the same ingested memory (``bench/locomo/ablate.py``). ``--cv GRID.json`` asks every
question once per grid candidate over the same memory and chooses among them by
leave-one-conversation-out cross-validation (``bench/locomo/cv.py``), written to
``locomo-<mode>-cv.{md,json}``.

Layout: this module holds the scoring math, the raw-turn baseline run and the CLI;
engramdb's ingest/ask/reference/ablation steps are in ``bench/locomo/engramdb_side.py``, the
tables and chart in ``bench/locomo/report.py``. Why this module is long: the CLI's wiring
(options, throwaway server, outputs, the CV files) is ~250 lines that only make sense beside the run.

Outputs (in ``--out``): ``locomo-<mode>.md`` (tables), ``locomo-<mode>.json`` (config,
aggregates, per-question scores keyed by question id — never dataset text — and, with
``--ablate``, an ``ablation`` object per stage) and
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.locomo.data import (
    CATEGORY_NAMES,
    SCORED_CATEGORIES,
    Conversation,
    Question,
    load_locomo,
    subset,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "bench" / "locomo" / "locomo-dev.json"
DEFAULT_OUT = REPO_ROOT / "bench" / "results"
KS = (5, 10, 20)
TOPK = 20
ENGRAMDB = "engramdb"
BASELINES = ("bm25", "dense", "hybrid-rrf")
FACTS_COSINE = "facts-cosine"  # cosine over engramdb's own stored facts (bench/locomo/facts_cosine.py)
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
    from bench.locomo.baselines import BM25Index, DenseIndex, rrf, stemmer_name

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
    p.add_argument(
        "--cv",
        type=Path,
        default=None,
        metavar="GRID.json",
        help="leave-one-conversation-out choice among the grid's retrieve config_overrides "
        "(bench/locomo/cv.py); writes locomo-<mode>-cv.{md,json}",
    )
    p.add_argument(
        "--cv-objective",
        choices=("recall@10", "recall@20", "recall@10+20"),
        default="recall@10",
        help="what --cv maximises on the training folds (categories 1-4); recall@10+20: the "
        "mean of both, for candidates that only reorder ranks 11-20",
    )
    p.add_argument(
        "--jobs",
        default="none",
        metavar="all|none|JOB[,JOB]",
        help="sleep-time jobs run over every agent after its ingest, before its questions "
        "(ADR-0030; default: none)",
    )
    p.add_argument(
        "--llm-record",
        type=Path,
        default=None,
        metavar="CASSETTE.jsonl",
        help="configured mode: append every LLM call's answer (and seconds, tokens) to this "
        "file (bench/shared/llm_cassette.py)",
    )
    p.add_argument(
        "--llm-replay",
        type=Path,
        default=None,
        metavar="CASSETTE.jsonl",
        help="configured mode: answer every LLM call from a --llm-record file, never calling a "
        "model (no LLM server needed)",
    )
    p.add_argument(
        "--no-llm-resolution",
        action="store_true",
        help="configured mode: entity resolution without LLM calls (fuzzy matching only), so "
        "only the extractor uses the model — what the rule-based run gets too",
    )
    p.add_argument(
        "--llm-no-repair",
        action="store_true",
        help="configured mode: the LLM extractor without its post-processing "
        "(services/extraction/llm_postprocess.py), to measure what the repairs change",
    )
    p.add_argument(
        "--dump-facts",
        action="store_true",
        help="also write every stored fact (text, subject, attribute, category, sources) to "
        "<out>/facts-<mode>.jsonl, for looking at what the extractor produced",
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


def job_names(spec: str) -> tuple[str, ...]:
    """``--jobs``: ``none`` → (), ``all`` → every registered job, else a comma list."""
    from engramdb.services.jobs import BY_NAME, JOBS, select

    if spec.strip() in ("", "none"):
        return ()
    if spec.strip() == "all":
        return tuple(j.name for j in JOBS)
    names = [n.strip() for n in spec.split(",") if n.strip()]
    select(names)  # ValueError naming the unknown ones
    return tuple(n for n in BY_NAME if n in names)  # the registry's order


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


def _open_memory(settings: Any, embedder: Any, extractor: Any, cassette: Any = None,
                 llm_resolution: bool = True, repair: bool = True) -> Any:
    """Observations mode runs with no LLM at all (entity resolution included), so it is
    deterministic and offline; configured mode uses whatever the settings configure, or a
    recording/replaying cassette around it (``--llm-record`` / ``--llm-replay``)."""
    from engramdb.services.memory.facade import Memory
    from engramdb.services.write.models import WriteConfig

    if extractor is not None:
        return Memory.open(settings, llm=None, embedder=embedder, extractor=extractor)
    config = None if llm_resolution else WriteConfig(enable_llm_resolution=False)
    if cassette is not None or not repair:
        from engramdb.infra.providers.factory import make_llm
        from engramdb.services.extraction.llm_extractor import LLMExtractor

        llm = cassette if cassette is not None else make_llm(settings)
        chosen = None if llm is None else LLMExtractor(
            llm, timeout_sec=settings.llm_timeout_sec, repair=repair)
        return Memory.open(settings, llm=llm, embedder=embedder, write_config=config,
                           extractor=chosen)
    return Memory.open(settings, embedder=embedder, write_config=config)


def _cassette(args: argparse.Namespace, settings: Any) -> Any:
    """The ``--llm-record`` / ``--llm-replay`` provider, or None."""
    from bench.shared.llm_cassette import CassetteLLM
    from engramdb.infra.providers.factory import make_llm

    if args.llm_replay is not None:
        return CassetteLLM(args.llm_replay, "replay")
    if args.llm_record is not None:
        return CassetteLLM(args.llm_record, "record", make_llm(settings))
    return None


def _dump_facts(memory: Any, agent_ids: Sequence[str], path: Path) -> None:
    """Every fact (all statuses) of the run's agents, one JSON line each."""
    with path.open("w", encoding="utf-8") as fh:
        for agent_id in agent_ids:
            cursor = None
            while True:
                page = memory.list_facts(agent_id, status="all", limit=200, cursor=cursor)
                for item in page.items:
                    fh.write(json.dumps(item.model_dump(mode="json"), ensure_ascii=False) + "\n")
                cursor = page.next_cursor
                if cursor is None:
                    break


def _write_cv(
    out: Path,
    stem: str,
    candidates: Sequence[Any],
    candidate_runs: dict[str, SystemRun],
    conversations: Sequence[Conversation],
    summaries: dict[str, dict[str, Any]],
    meta: dict[str, Any],
) -> str:
    """Writes ``locomo-<mode>-cv.{md,json}`` (the held-out table and its diagnostics) and
    returns the markdown."""
    from bench.locomo.cv import cv_markdown, cv_summary

    fold_of = {q.qid: c.sample_id for c in conversations for q in scorable(c)}
    cv = cv_summary(candidates, {n: r.rows for n, r in candidate_runs.items()}, fold_of,
                    meta.get("cv_objective") or "recall@10")
    references = {n: {"by_category": s["by_category"]} for n, s in summaries.items() if n in REFERENCES}
    # a context-only candidate (profiles_in_context) moves no recall: its cost is its tokens
    tokens = {n: round(statistics.fmean(r.context_tokens), 1) for n, r in candidate_runs.items()
              if r.context_tokens}
    (out / f"{stem}-cv.json").write_text(
        json.dumps({"meta": meta, "cv": cv, "references": references, "context_tokens_mean": tokens},
                   indent=2, allow_nan=True),
        encoding="utf-8",
    )
    report = cv_markdown(cv, summaries, meta)
    (out / f"{stem}-cv.md").write_text(report, encoding="utf-8")
    return report


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    args = build_parser().parse_args(argv)
    if not args.data.is_file():
        print(f"error: LoCoMo data not found at {args.data}. The data is not in this repository "
              "(CC BY-NC 4.0): take locomo10.json from https://github.com/snap-research/locomo "
              "(data/locomo10.json) and pass --data PATH", file=sys.stderr)
        return 2
    if args.skip_engramdb and args.skip_baselines:
        print("nothing to run: both --skip-engramdb and --skip-baselines given", file=sys.stderr)
        return 2
    candidates: list[Any] = []
    if args.cv is not None:
        from bench.locomo.cv import load_grid

        if args.skip_engramdb:
            print("--cv chooses engramdb's config: it needs engramdb (no --skip-engramdb)", file=sys.stderr)
            return 2
        try:
            candidates = load_grid(args.cv)
        except (OSError, ValueError) as exc:  # GridError, JSON errors, a missing file
            print(f"--cv {args.cv}: {exc}", file=sys.stderr)
            return 2
    try:
        jobs = job_names(args.jobs)
    except ValueError as exc:
        print(f"--jobs: {exc}", file=sys.stderr)
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
    if candidates and len(conversations) < 2:
        print("--cv needs at least 2 conversations (one fold each)", file=sys.stderr)
        return 2

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
    candidate_runs: dict[str, SystemRun] = {}
    summaries_extra: dict[str, Any] = {}
    started = time.perf_counter()
    try:
        if not args.skip_baselines:
            for name, run in run_baselines(conversations, embedder).items():
                summaries[name] = run.summary()
        if not args.skip_engramdb:
            extractor = None
            if args.mode == "observations":
                from bench.locomo.observations import ObservationExtractor

                extractor = ObservationExtractor(
                    {f"locomo-{c.sample_id}-{run_id}": c.observations for c in conversations}
                )
            if (args.llm_record or args.llm_replay) and args.mode != "configured":
                print("--llm-record/--llm-replay need --mode configured", file=sys.stderr)
                return 2
            cassette = _cassette(args, settings) if extractor is None else None
            memory = _open_memory(settings, embedder, extractor, cassette,
                                  llm_resolution=not args.no_llm_resolution,
                                  repair=not args.llm_no_repair)
            try:
                from bench.locomo.engramdb_side import run_engramdb

                runs, ablation, candidate_runs = run_engramdb(
                    conversations,
                    memory,
                    run_id=run_id,
                    merge=args.merge,
                    retrieve_overrides=args.retrieve_overrides,
                    embedder=None if args.skip_baselines else embedder,
                    ablate=args.ablate,
                    cv_candidates=candidates,
                    jobs=jobs,
                )
                if args.dump_facts:
                    args.out.mkdir(parents=True, exist_ok=True)
                    _dump_facts(memory, [f"locomo-{c.sample_id}-{run_id}" for c in conversations],
                                args.out / f"facts-{args.mode}.jsonl")
                if cassette is not None:
                    summaries_extra["llm_cassette"] = {
                        "mode": cassette.mode, "path": str(cassette.path), "calls": cassette.calls,
                        "misses": cassette.misses,
                    }
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
        "cv_grid": str(args.cv) if args.cv else None,
        "cv_objective": args.cv_objective,
        "jobs": list(jobs),
        "seconds": round(total_s, 1),
        "run_id": run_id,
        **summaries_extra,
        "command": "engramdb bench locomo " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    from bench.locomo.report import markdown_report, recall10_chart

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
    if candidates:
        print(_write_cv(out, stem, candidates, candidate_runs, conversations, summaries, meta))
    log(f"done in {total_s:.0f}s; wrote {out / stem}.{{md,json}} and -recall10.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
