"""The LLM reranker measured (issue 26): LoCoMo evidence recall with rerank on vs off, same
memory and same run, plus what the judge costs — its added latency, timeouts and fallbacks,
prompt and output tokens.

Why a benchmark of its own: ``bench.locomo.run`` asks with the reranker off (it needs an LLM
and costs a call per question), and the reranker had only ever met a scripted provider.

Method: each conversation is ingested once with the rule-based extractor and no LLM at all
(entity resolution included), so memory is the same for both arms and needs no model; then
every scorable question is asked twice — ``enable_reranker`` False, then True — with
``topk_facts = topk_events = --topk``. The reranker judges the top ``2·topk`` facts and
``2·topk`` turns in one call (``services/retrieve/stages.py``), bounded by
``reranker_timeout_sec`` (``--timeout``) and by ``rerank_max_tokens``. Recall is over the
two lists merged by score (``bench/locomo/run.py``'s ``--merge score``).

The LLM: whatever the settings configure (``ENGRAMDB_LLM_*``), or a cassette
(``--llm-record`` / ``--llm-replay``, ``bench/shared/llm_cassette.py``): a replay reports the
recorded calls' seconds and tokens, never a model's.

    python -m bench.rerank.run --conversations 1 --sessions 8 --topk 5 --timeout 120 \\
        --llm-record /tmp/rerank.jsonl --out /tmp/rerank
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.locomo.data import CATEGORY_NAMES, SCORED_CATEGORIES, load_locomo, subset
from bench.locomo.engramdb_side import ingest_conversation
from bench.locomo.run import (
    DEFAULT_DATA,
    MemoEmbedder,
    merge_units,
    percentile,
    scorable,
    score_units,
    units_from_result,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.rerank.run", description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--conversations", type=int, default=1)
    p.add_argument("--sessions", type=int, default=None)
    p.add_argument("--questions", type=int, default=None, help="only the first N questions of each")
    p.add_argument("--topk", type=int, default=5, help="topk_facts = topk_events (default 5)")
    p.add_argument("--timeout", type=float, default=120.0, help="reranker_timeout_sec")
    p.add_argument("--embedder", default=None)
    p.add_argument("--llm-record", type=Path, default=None, metavar="CASSETTE.jsonl")
    p.add_argument("--llm-replay", type=Path, default=None, metavar="CASSETTE.jsonl")
    p.add_argument("--out", type=Path, default=Path("bench/results"))
    p.add_argument("--max-minutes", type=float, default=None,
                   help="stop asking new questions after this long and report what was asked "
                   "(a slow local model on a shared box)")
    return p


def _llm(args: argparse.Namespace, settings: Any) -> Any:
    from bench.shared.llm_cassette import CassetteLLM
    from engramdb.infra.providers.factory import make_llm

    if args.llm_replay is not None:
        return CassetteLLM(args.llm_replay, "replay")
    llm = make_llm(settings)
    if llm is None:
        raise SystemExit("no LLM configured (ENGRAMDB_LLM_BASE_URL / _API_KEY) and no --llm-replay")
    return CassetteLLM(args.llm_record, "record", llm) if args.llm_record else llm


def _pct(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "mean": None}
    return {"p50": round(percentile(values, 50), 1), "p95": round(percentile(values, 95), 1),
            "mean": round(statistics.fmean(values), 1)}


def _recall(rows: list[dict[str, Any]], metric: str) -> float:
    picked = [r[metric] for r in rows if r["category"] in SCORED_CATEGORIES]
    return round(100.0 * statistics.fmean(picked), 1) if picked else float("nan")


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    args = build_parser().parse_args(argv)
    from engramdb.infra.providers.factory import make_embedder
    from engramdb.infra.settings import Settings
    from engramdb.services.extraction.rule_based import RuleBasedExtractor
    from engramdb.services.memory.facade import Memory
    from engramdb.services.write.models import WriteConfig

    conversations = subset(load_locomo(args.data), max_conversations=args.conversations,
                           max_sessions=args.sessions, max_questions=args.questions)
    temp = Path(tempfile.mkdtemp(prefix="engramdb-rerank-", dir="/tmp"))
    overrides: dict[str, Any] = {"data_dir": temp}
    if args.embedder:
        overrides["embedding_model"] = args.embedder
    settings = Settings(**overrides)
    llm = _llm(args, settings)
    embedder = MemoEmbedder(make_embedder(settings))
    run_id = uuid.uuid4().hex[:8]
    base = {"topk_facts": args.topk, "topk_events": args.topk, "reranker_timeout_sec": args.timeout}
    rows: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    latency: dict[str, list[float]] = {"off": [], "on": []}
    statuses: dict[str, int] = {}
    rerank_ms: list[float] = []
    items: list[int] = []
    started = time.perf_counter()
    try:
        memory = Memory.open(settings, llm=llm, embedder=embedder, extractor=RuleBasedExtractor(),
                             write_config=WriteConfig(enable_llm_resolution=False), quiet=True)
        try:
            ingest: dict[str, Any] = {"messages": 0, "seconds": 0.0, "extraction_errors": 0,
                                      "duplicates": 0, "decisions": 0, "facts_extracted": 0,
                                      "llm_calls": 0, "errors_by_kind": {}, "write_seconds": []}
            for conv in conversations:
                agent = f"rerank-{conv.sample_id}-{run_id}"
                ingest_conversation(memory, conv, agent, ingest)
                for n, q in enumerate(scorable(conv), start=1):
                    if args.max_minutes is not None and time.perf_counter() - started > args.max_minutes * 60:
                        break
                    for arm in ("off", "on"):
                        cfg = {**base, "enable_reranker": arm == "on"}
                        t0 = time.perf_counter()
                        result = memory.retrieve(agent, q.question, config_overrides=cfg)
                        latency[arm].append((time.perf_counter() - t0) * 1000.0)
                        units = merge_units(*units_from_result(result), "score")
                        rows[arm].append({"qid": q.qid, "category": q.category,
                                          **score_units(units, q.gold)})
                        if arm == "on":
                            info = (result.trace or {}).get("reranker") or {}
                            status = str(info.get("status", "?")).split(":")[0]
                            statuses[status] = statuses.get(status, 0) + 1
                            rerank_ms.append(float(info.get("duration_ms") or 0.0))
                            items.append(int(info.get("items") or 0))
                    print(f"[rerank {time.strftime('%H:%M:%S')}] {conv.sample_id} q{n}: "
                          f"on {rows['on'][-1]['recall@10']:.2f} off {rows['off'][-1]['recall@10']:.2f} "
                          f"({statuses})", file=sys.stderr, flush=True)
        finally:
            memory.close()
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    added = [on - off for on, off in zip(latency["on"], latency["off"], strict=True)]
    report: dict[str, Any] = {
        "command": "python -m bench.rerank.run " + " ".join(sys.argv[1:] if argv is None else argv),
        "model": getattr(llm, "name", None),
        "questions": len(rows["on"]),
        "stopped_by_max_minutes": args.max_minutes is not None
        and sum(len(scorable(c)) for c in conversations) > len(rows["on"]),
        "questions_overall": sum(1 for r in rows["on"] if r["category"] in SCORED_CATEGORIES),
        "topk": args.topk, "timeout_sec": args.timeout,
        "recall": {arm: {m: _recall(rows[arm], m) for m in ("recall@5", "recall@10", "recall@20")}
                   for arm in rows},
        "by_category_recall@10": {
            CATEGORY_NAMES[c]: {arm: round(100.0 * statistics.fmean(
                [r["recall@10"] for r in rows[arm] if r["category"] == c]), 1)
                for arm in rows} for c in SCORED_CATEGORIES
            if any(r["category"] == c for r in rows["on"])},
        "reranker_status": statuses,
        "rerank_call_ms": _pct(rerank_ms),
        "added_latency_ms": _pct(added),
        "retrieve_ms": {arm: _pct(v) for arm, v in latency.items()},
        "items_judged_mean": round(statistics.fmean(items), 1) if items else None,
        "seconds": round(time.perf_counter() - started, 1),
        "per_question": rows,
    }
    if getattr(llm, "path", None) is not None:
        from bench.shared.llm_cassette import summary

        report["cassette"] = {"mode": llm.mode, "path": str(llm.path), "misses": llm.misses,
                              **(summary(llm.path) if llm.path.exists() else {})}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rerank.json").write_text(json.dumps(report, indent=2), encoding="utf-8")
    brief = {k: v for k, v in report.items() if k != "per_question"}
    print(json.dumps(brief, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
