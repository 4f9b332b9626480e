"""engramdb's side of the LoCoMo run: ingest, ask, facts-cosine, the ablation, the CV grid.

Why a module of its own: these are the steps that need a live ``Memory`` (a database, the
write pipeline, the projections); ``bench/locomo/run.py`` keeps the scoring math, the raw-turn
baselines and the CLI, which run without one.

Order of work: each conversation is ingested as one agent and its questions asked at once
(the headline run, with every merge); ``facts-cosine`` reads the facts that agent now holds.
The ablation waits until every conversation is in, then asks every question once per
variant — so all its rows, the all-on ``none`` row included, see the same memory. The
``--cv`` grid's candidates are asked the same way, after the ablation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.locomo.cv import Candidate
from bench.locomo.data import Conversation
from bench.locomo.run import (
    ENGRAMDB,
    FACTS_COSINE,
    MERGES,
    TOPK,
    SystemRun,
    log,
    merge_units,
    scorable,
    units_from_result,
)


def ingest_conversation(
    memory: Any, conv: Conversation, agent_id: str, ingest: dict[str, Any]
) -> float:
    """Write every turn of ``conv`` in order as ``agent_id`` and wait for the read models;
    adds to the ``ingest`` counters and returns the seconds it took."""
    position: int | None = None
    start = time.perf_counter()
    for session in conv.sessions:
        for turn in session.turns:
            t0 = time.perf_counter()
            result = memory.write(
                agent_id,
                turn.full_text,
                speaker=turn.speaker,
                session_id=session.session_id,
                occurred_at=session.occurred_at,
                message_id=turn.dia_id,
                metadata={"benchmark": "locomo", "sample_id": conv.sample_id},
            )
            ingest["write_seconds"].append(time.perf_counter() - t0)
            position = max(position or 0, int(getattr(result, "position", 0) or 0))
            ingest["messages"] += 1
            ingest["duplicates"] += int(bool(getattr(result, "duplicate", False)))
            ingest["extraction_errors"] += int(bool(getattr(result, "extraction_error", None)))
            ingest["decisions"] += len(getattr(result, "decisions", None) or [])
            count_extraction(memory, agent_id, turn.dia_id, result, ingest)
    memory.wait_for_projections(position, timeout=900.0)
    elapsed = time.perf_counter() - start
    ingest["seconds"] += elapsed
    return elapsed


def error_kind(error: str | None) -> str | None:
    """What an extraction error was, from its text: ``truncated`` (cut at ``max_tokens``),
    ``timeout``, ``partial`` (some items dropped or capped; the rest was used) or ``failed``."""
    if not error:
        return None
    if "ProviderTruncated" in error or "max_tokens" in error:
        return "truncated"
    if "timed out" in error:
        return "timeout"
    if error.startswith(("dropped ", "capped ")):
        return "partial"
    return "failed"


def count_extraction(
    memory: Any, agent_id: str, message_id: str, result: Any, ingest: dict[str, Any]
) -> None:
    """The extraction counters of one written message: LLM calls, facts the extractor
    returned (read from the message's record, which the write result does not carry) and
    the kind of its extraction error, if any."""
    ingest["llm_calls"] += int(getattr(result, "llm_calls", 0) or 0)
    kind = error_kind(getattr(result, "extraction_error", None))
    if kind is not None:
        ingest["errors_by_kind"][kind] = ingest["errors_by_kind"].get(kind, 0) + 1
    app = getattr(memory, "app", None)
    record = app.message_record(agent_id, message_id) if app is not None else None
    extraction = getattr(record, "extraction", None) or {}
    ingest["facts_extracted"] += len(extraction.get("facts") or [])


def summarise_ingest(ingest: dict[str, Any], extractor: Any) -> dict[str, Any]:
    """Per-message figures of the write path (issue 9: the LLM path measured)."""
    from bench.locomo.run import percentile

    seconds = ingest.pop("write_seconds")
    n = max(1, ingest["messages"])
    info = getattr(extractor, "info", None)
    ingest["extractor"] = (
        "/".join(str(p) for p in (info.extractor, info.model, info.prompt_version) if p)
        if info is not None
        else type(extractor).__name__
    )
    ingest["valid_extractions"] = ingest["messages"] - ingest["extraction_errors"]
    ingest["facts_per_message"] = round(ingest["facts_extracted"] / n, 3)
    ingest["llm_calls_per_message"] = round(ingest["llm_calls"] / n, 3)
    ingest["truncations"] = ingest["errors_by_kind"].get("truncated", 0)
    ingest["write_seconds"] = {
        "p50": round(percentile(seconds, 50), 3),
        "p95": round(percentile(seconds, 95), 3),
        "mean": round(sum(seconds) / len(seconds), 3) if seconds else float("nan"),
    }
    return ingest


def run_jobs(memory: Any, agent_id: str, names: Sequence[str], totals: dict[str, Any]) -> float:
    """``--jobs``: one pass of the sleep-time jobs over the just-ingested agent (no broker:
    the feedback job has nothing to read — LoCoMo has no retrieval feedback), then the read
    models wait for their events. Adds seconds/events per job to ``totals``."""
    from engramdb.services.jobs import JobContext, select
    from engramdb.services.jobs.runner import run_pass

    start = time.perf_counter()
    for run in run_pass(JobContext(memory, nats_url=None, timeout_sec=900.0), select(list(names)),
                        [agent_id]):
        entry = totals.setdefault(run.job, {"seconds": 0.0, "events": 0, "failed": 0})
        entry["seconds"] = round(entry["seconds"] + run.seconds, 2)
        entry["events"] += run.events
        entry["failed"] += int(run.status in ("failed", "timeout"))
    memory.wait_for_projections(timeout=900.0)
    return time.perf_counter() - start


def run_facts_cosine(
    memory: Any, conv: Conversation, agent_id: str, embedder: Any, run: SystemRun
) -> int:
    """The ``facts-cosine`` reference for one ingested conversation; returns its fact count."""
    from bench.locomo.facts_cosine import FactsCosineIndex, stored_facts

    index = FactsCosineIndex(stored_facts(memory, agent_id), embedder)
    for q in scorable(conv):
        t0 = time.perf_counter()
        units = index.rank(embedder.embed_query(q.question), TOPK)
        run.add(q, units)
        run.latencies_ms.append((time.perf_counter() - t0) * 1000.0)
    return len(index.facts)


def ask_every_question(
    conversations: Sequence[Conversation],
    memory: Any,
    agent_ids: dict[str, str],
    *,
    overrides: dict[str, Any],
    merge: str,
    run_name: str,
) -> tuple[SystemRun, int]:
    """Every scorable question of every (already ingested) conversation once, with
    ``overrides``; returns the scored run and how many questions had a keyword word."""
    run = SystemRun(run_name)
    with_words = 0
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
    return run, with_words


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
    from bench.locomo.ablate import ABLATIONS, merged_overrides

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
        start = time.perf_counter()
        run, with_words = ask_every_question(
            conversations,
            memory,
            agent_ids,
            overrides=merged_overrides(base_overrides, ablation.overrides),
            merge=merge,
            run_name=ablation.run_name,
        )
        entry["questions_with_keyword_words"] = with_words
        entry["summary"] = run.summary()
        on_progress(
            f"ablation: without {ablation.stage}: R@10 "
            f"{entry['summary']['by_category']['overall']['recall@10']:.1f} "
            f"({time.perf_counter() - start:.0f}s)"
        )
    return out


def run_candidates(
    conversations: Sequence[Conversation],
    memory: Any,
    agent_ids: dict[str, str],
    candidates: Sequence[Candidate],
    *,
    merge: str,
    base_overrides: dict[str, Any],
    on_progress: Callable[[str], None] = log,
) -> dict[str, SystemRun]:
    """``--cv``: every question once per grid candidate, over the already ingested agents
    (the ablation's machinery: same memory for every candidate, retrieve time only)."""
    from bench.locomo.ablate import merged_overrides

    out: dict[str, SystemRun] = {}
    for candidate in candidates:
        start = time.perf_counter()
        run, _ = ask_every_question(
            conversations,
            memory,
            agent_ids,
            overrides=merged_overrides(base_overrides, candidate.overrides),
            merge=merge,
            run_name=candidate.name,
        )
        out[candidate.name] = run
        on_progress(
            f"cv: candidate {candidate.name}: in-sample R@10 "
            f"{run.summary()['by_category']['overall']['recall@10']:.1f} "
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
    cv_candidates: Sequence[Candidate] = (),
    jobs: Sequence[str] = (),
    on_progress: Callable[[str], None] = log,
) -> tuple[dict[str, SystemRun], dict[str, dict[str, Any]], dict[str, SystemRun]]:
    """Ingest each conversation as one agent, then ask its questions. Returns the headline
    run (``engramdb``, merged with ``merge``), one diagnostic run per other merge and, with
    ``embedder``, the ``facts-cosine`` reference over the same stored facts; plus, with
    ``ablate``, the ablation table's entries (asked after every conversation is in); plus, with
    ``cv_candidates``, one run per grid candidate (``bench/locomo/cv.py``), asked likewise.
    ``jobs``: sleep-time jobs run over each agent after its ingest, before its questions."""
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
        "facts_extracted": 0,
        "llm_calls": 0,
        "errors_by_kind": {},
        "write_seconds": [],
    }
    units_seen = {"facts": 0, "events": 0, "queries": 0}
    agent_ids: dict[str, str] = {}
    job_totals: dict[str, Any] = {}
    n_facts = 0
    for conv in conversations:
        agent_id = agent_ids[conv.sample_id] = f"locomo-{conv.sample_id}-{run_id}"
        elapsed = ingest_conversation(memory, conv, agent_id, ingest)
        if jobs:
            job_s = run_jobs(memory, agent_id, jobs, job_totals)
            on_progress(f"engramdb: {conv.sample_id} jobs {', '.join(jobs)} in {job_s:.0f}s")
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
    summarise_ingest(ingest, getattr(memory, "extractor", None))
    n_queries = max(1, units_seen["queries"])
    headline.extra["ingest"] = ingest
    if jobs:
        headline.extra["jobs"] = job_totals
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
    candidate_runs = (
        run_candidates(
            conversations,
            memory,
            agent_ids,
            cv_candidates,
            merge=merge,
            base_overrides=overrides,
            on_progress=on_progress,
        )
        if cv_candidates
        else {}
    )
    return runs, ablation, candidate_runs
