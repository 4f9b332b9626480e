"""Write-path benchmark: ``python -m bench.write.path [--messages N] [--agents A]``.

The extractor is the real ``LLMExtractor`` on an INSTANT scripted LLM (a test double that
returns one canned fact per message), so the figures are engramdb's own overhead, not an
LLM's latency. Measured:

1. in-process ``WritePipeline.write`` latency per message (p50/p95): record save,
   aggregate load (cached), prompt building, resolution, reconciliation, atomic commit;
2. end-to-end throughput through NATS: publish N messages for several agents → ingest app
   (durable pull consumer, ack after save) → events saved, and → facts visible in the
   ``mem_facts`` projection (projection runners on the same machine);
3. LLM calls per message.

Servers: ``ENGRAMDB_DATABASE_URL`` / ``ENGRAMDB_NATS_URL`` if set, else the embedded ones in a
throwaway data dir. Each run uses a fresh PostgreSQL schema and NATS subject prefix.
Targets (2-core machine): overhead p50 ≤ 20 ms, ≥ 200 messages/s, 1 LLM call per message.
``--baseline`` also runs the unbatched write path (each save its own transaction, 4 workers)
interleaved in the same process and reports the ratio; every figure is the median of
``--runs`` (3) runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _instant_llm() -> Any:
    from engramdb.infra.providers.scripted import ScriptedLLM

    def answer(messages: Sequence[dict[str, Any]]) -> str:
        user = messages[-1]["content"]
        text = user.split('Message:\n"""\n', 1)[1].rsplit('\n"""', 1)[0]
        return json.dumps(
            {
                "facts": [
                    {
                        "text": f"Ana said: {text}",
                        "entity": "Ana",
                        "confidence_level": "explicit_statement",
                    }
                ],
                "entities": [{"name": "Ana", "entity_type": "person"}],
                "relationships": [],
            }
        )

    return ScriptedLLM(answer, name="instant-scripted")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _servers(tmp: Path) -> tuple[str, str, list[Any]]:
    from engramdb.infra.database import ensure_extensions

    handles: list[Any] = []
    pg_url = os.environ.get("ENGRAMDB_DATABASE_URL")
    nats_url = os.environ.get("ENGRAMDB_NATS_URL")
    if not pg_url:
        from engramdb.infra.embedded_postgres import ensure_postgres

        handle = ensure_postgres(tmp, fast_unsafe=True)
        handles.append(handle)
        pg_url = handle.url
    if not nats_url:
        from engramdb.infra.embedded_nats import ensure_nats

        nats_handle = ensure_nats(tmp)
        handles.append(nats_handle)
        nats_url = nats_handle.url
    ensure_extensions(pg_url)
    return pg_url, nats_url, handles


def bench_in_process(env: dict[str, str], n: int, agents: int) -> dict[str, Any]:
    from engramdb.services.extraction import LLMExtractor
    from engramdb.services.memory.event_log import EventLog
    from engramdb.services.write.messages import ConversationMessage
    from engramdb.services.write.pipeline import WritePipeline

    app = EventLog(env)
    llm = _instant_llm()
    pipeline = WritePipeline(app, LLMExtractor(llm))
    ids = [f"bench-inproc-{uuid.uuid4().hex[:6]}-{a}" for a in range(agents)]
    durations, calls = [], 0
    try:
        for i in range(n + 20):
            message = ConversationMessage(
                agent_id=ids[i % agents],
                message_id=f"m{i}",
                speaker="Ana",
                text=f"Message number {i} about my week.",
            )
            result = pipeline.write(message)
            if i >= 20:  # warm-up: first loads, prepared statements
                durations.append(result.duration_ms)
                calls += result.llm_calls
    finally:
        app.close()
    return {
        "messages": n,
        "overhead_ms_p50": round(statistics.median(durations), 2),
        "overhead_ms_p95": round(_percentile(durations, 0.95), 2),
        "llm_calls_per_message": calls / n,
    }


def bench_end_to_end(
    env: dict[str, str],
    nats_url: str,
    n: int,
    agents: int,
    with_projections: bool = True,
    concurrency: int = 8,
    batched: bool = True,
    change_stream: bool = False,
    webhooks: int = 0,
) -> dict[str, Any]:
    """One run; ``batched=False`` is the baseline: each save its own transaction (2 per
    message: record, then decisions), no batch recording of a fetch. ``change_stream``: the
    change publisher (ADR-0049) follows the log meanwhile, as ``serve`` runs it; ``webhooks``:
    that many webhooks (every agent) deliver to a local receiver meanwhile."""
    from engramdb.infra.providers.scripted import HashEmbedder
    from engramdb.services.entrypoints.nats.ingest import IngestThread, build_ingest_app
    from engramdb.services.entrypoints.nats.publisher import MessagePublisher
    from engramdb.services.extraction import LLMExtractor
    from engramdb.services.memory.event_log import EventLog
    from engramdb.services.write.messages import ConversationMessage
    from engramdb.services.write.pipeline import WritePipeline, WriteResult

    prefix = f"bench{uuid.uuid4().hex[:8]}"
    app = EventLog(env)
    llm = _instant_llm()
    pipeline = WritePipeline(app, LLMExtractor(llm), group_commit=batched)
    results: list[WriteResult] = []
    done = threading.Event()
    lock = threading.Lock()

    def on_result(result: WriteResult) -> None:
        with lock:
            results.append(result)
            if len(results) >= n:
                done.set()

    projections = None
    if with_projections:
        try:
            from engramdb.projections.runner import ProjectionSet

            projections = ProjectionSet.start(EventLog, env, HashEmbedder())
        except ImportError:
            projections = None
    ingest_app, _ = build_ingest_app(
        nats_url,
        pipeline,
        prefix=prefix,
        on_result=on_result,
        batch_size=64,
        max_concurrency=concurrency,
        batch_records=batched,
    )
    runner = IngestThread(ingest_app).start()
    changes = None
    if change_stream:
        from engramdb.services.entrypoints.nats.changes import ChangePublisher

        changes = ChangePublisher(  # this run's changes, not the earlier runs' in the schema
            app, nats_url, prefix, start_after=app.recorder.max_notification_id() or 0).start()
    hooks = _start_webhooks(nats_url, prefix, webhooks) if webhooks else None
    ids = [f"bench-e2e-{uuid.uuid4().hex[:6]}-{a}" for a in range(agents)]
    messages = [
        ConversationMessage(
            agent_id=ids[i % agents],
            message_id=f"m{i}",
            speaker="Ana",
            text=f"Message number {i} about my week.",
        )
        for i in range(n)
    ]

    async def publish() -> None:
        async with MessagePublisher(nats_url, prefix) as pub:
            for start in range(0, n, 200):
                await pub.publish_many(messages[start : start + 200])

    before = dict(pipeline.commits.stats)
    try:
        started = time.perf_counter()
        asyncio.run(publish())
        published = time.perf_counter() - started
        if not done.wait(timeout=max(60.0, n / 20)):
            raise TimeoutError(f"only {len(results)}/{n} messages were processed")
        saved = time.perf_counter() - started
        visible = None
        if projections is not None:
            projections.wait(max(r.position for r in results), timeout=120)
            visible = time.perf_counter() - started
        if changes is not None:  # the stream caught up: its cost is inside the run
            head = max(r.position for r in results)
            while changes.position < head and time.perf_counter() - started < 300:
                time.sleep(0.02)
            changes_s = time.perf_counter() - started
    finally:
        runner.stop()
        if projections is not None:
            projections.stop()
        if changes is not None:
            changes.stop()
        if hooks is not None:
            hooks[0].stop()
            hooks[1].shutdown()
        app.close()
    extra = {} if changes is None else {
        "changes_published": changes.published, "changes_caught_up_s": round(changes_s, 3)}
    if hooks is not None:
        extra["webhook_deliveries_during_run"] = sum(c["delivered"] for c in hooks[0].stats.values())
    return {
        **extra,
        "mode": ("batched" if batched else "baseline") + ("+changes" if change_stream else "")
        + (f"+{webhooks}webhooks" if webhooks else ""),
        "concurrency": concurrency,
        "messages": n,
        "agents": agents,
        "publish_s": round(published, 3),
        "events_saved_msgs_per_s": round(n / saved, 1),
        "facts_visible_msgs_per_s": round(n / visible, 1) if visible else None,
        "llm_calls_per_message": sum(r.llm_calls for r in results) / n,
        "duplicates": sum(r.duplicate for r in results),
        "conflicts": sum(r.conflicts for r in results),
        # event-store transactions per message (2 without group commit: record, decisions)
        "store_transactions_per_message": round(
            (pipeline.commits.stats["transactions"] - before["transactions"]) / n, 3
        ),
    }


def _start_webhooks(nats_url: str, prefix: str, n: int) -> tuple[Any, Any]:
    """``n`` webhooks for every agent, delivering to one local HTTP receiver (204s)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from engramdb.infra.embedded_base import pick_port
    from engramdb.services.entrypoints.nats.webhooks import WebhookDispatcher
    from engramdb.services.management.webhooks import Webhook

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    port = pick_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    hooks = [Webhook(webhook_id=f"wh_bench{i}", url=f"http://127.0.0.1:{port}/", agent_prefix="",
                     secret="bench-secret-0123456789") for i in range(n)]
    return WebhookDispatcher(hooks, nats_url, prefix).start(), server


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median events-saved rate, plus the medians of both rates."""
    ordered = sorted(runs, key=lambda r: r["events_saved_msgs_per_s"])
    out = dict(ordered[len(ordered) // 2])
    out["runs_events_saved_msgs_per_s"] = [r["events_saved_msgs_per_s"] for r in runs]
    visible = [r["facts_visible_msgs_per_s"] for r in runs if r["facts_visible_msgs_per_s"]]
    out["facts_visible_msgs_per_s"] = round(statistics.median(visible), 1) if visible else None
    out["runs_facts_visible_msgs_per_s"] = visible or None
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--inproc-messages", type=int, default=300)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=8, help="ingest worker threads")
    parser.add_argument("--runs", type=int, default=3, help="end-to-end runs per mode (median reported)")
    parser.add_argument("--baseline", action="store_true",
                        help="also run the unbatched baseline (4 workers, 2 transactions per message), "
                             "interleaved with the batched runs in the same process, and report the ratio")
    parser.add_argument("--no-projections", action="store_true", help="measure ingest alone")
    parser.add_argument("--change-stream", action="store_true",
                        help="also run with the change publisher (ADR-0049) and report the ratio")
    parser.add_argument("--webhooks", type=int, default=0,
                        help="with --change-stream: also that many webhooks to a local receiver")
    args = parser.parse_args(argv)

    import psycopg

    from engramdb.infra.database import es_env_from_url

    tmp = Path(tempfile.mkdtemp(prefix="engramdb-bench-", dir="/tmp"))
    pg_url, nats_url, handles = _servers(tmp)
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    env = es_env_from_url(pg_url, schema)
    proj = not args.no_projections
    try:
        report: dict[str, Any] = {"in_process": bench_in_process(env, args.inproc_messages, args.agents)}
        batched, baseline, streamed = [], [], []
        for _ in range(args.runs):  # interleaved, so both modes see the same machine load
            if args.baseline:
                baseline.append(bench_end_to_end(env, nats_url, args.messages, args.agents, proj, 4, batched=False))
            batched.append(bench_end_to_end(env, nats_url, args.messages, args.agents, proj, args.concurrency))
            if args.change_stream:
                streamed.append(bench_end_to_end(env, nats_url, args.messages, args.agents, proj,
                                                 args.concurrency, change_stream=True,
                                                 webhooks=args.webhooks))
        report["end_to_end"] = _median_run(batched)
        if streamed:
            report["end_to_end_with_change_stream"] = _median_run(streamed)
            report["change_stream_msgs_per_s_ratio"] = round(
                report["end_to_end_with_change_stream"]["events_saved_msgs_per_s"]
                / report["end_to_end"]["events_saved_msgs_per_s"], 3)
        if baseline:
            base = _median_run(baseline)
            report["baseline_end_to_end"] = base
            report["speedup_events_saved"] = round(
                report["end_to_end"]["events_saved_msgs_per_s"] / base["events_saved_msgs_per_s"], 2)
            if base["facts_visible_msgs_per_s"] and report["end_to_end"]["facts_visible_msgs_per_s"]:
                report["speedup_facts_visible"] = round(
                    report["end_to_end"]["facts_visible_msgs_per_s"] / base["facts_visible_msgs_per_s"], 2)
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        for handle in handles:
            handle.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    ip, e2e = report["in_process"], report["end_to_end"]
    report["targets"] = {
        "overhead_p50_le_20ms": ip["overhead_ms_p50"] <= 20.0,
        # ingest through NATS, events committed (projections running on the same cores if enabled)
        "ingest_ge_200_msgs_per_s": e2e["events_saved_msgs_per_s"] >= 200,
        # facts queryable: bounded by the projection runners (projections/), reported separately
        "facts_visible_ge_200_msgs_per_s": (e2e["facts_visible_msgs_per_s"] or 0) >= 200 if proj else None,
        "one_llm_call_per_message": ip["llm_calls_per_message"] == 1.0 and e2e["llm_calls_per_message"] == 1.0,
    }
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
