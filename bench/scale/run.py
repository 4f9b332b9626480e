"""Scale bench (issue 13, item 5): ``python -m bench.scale.run [--runs 3] [--rebuild 100000,300000]``.

(a) **Ingest**: 1 vs 2 vs 3 ``engramdb serve`` processes (role ``all``) on ONE embedded
    PostgreSQL + NATS: ``--agents`` × ``--per-agent`` messages published on NATS at once, timed
    until every message's fact is visible in ``mem_facts`` (messages/s), then each agent's
    decisions are checked to be in publication order, once each. Two extractors: ``offline``
    (the rule-based one, no LLM) and ``llm`` (the real ``LLMExtractor`` over HTTP on an INSTANT
    deterministic OpenAI-compatible server, ``bench/scale/instant_llm.py``: engramdb's cost without the
    model's thinking time).
(b) **Retrieve under write load**: in the same configuration, one client sends ``POST
    /v1/retrieve`` round-robin to the serves, first idle (``--idle-requests``), then while a
    second batch of messages streams in; p95 of each and their ratio (same run, same state).
(c) **Rebuild**: events/s (cold and warm embedding cache) and the rebuild process's peak RSS
    at each size of ``--rebuild`` (``bench/scale/rebuild_figures.py``; 1M: ``--rebuild 100000,1000000``).

Every figure is the median over ``--runs`` runs; configurations are interleaved (run 1: 1, 2,
3 processes; run 2: ...), so drift in the box's load spreads over all of them; ratios divide by
the 1-process run of the same extractor. The 1-minute load average is printed per
configuration: on a shared box read the ratios, not the absolute figures. Servers are
throwaway (embedded, ``fast_unsafe``) in /tmp; ``ENGRAMDB_INGEST_PARTITIONS`` is 6 (divisible by
1, 2 and 3 processes); embedder ``hash-bow-384``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg

from bench.load.run import nats_server, query, seed_messages
from bench.scale.rebuild_figures import RebuildFigures, rebuild_figures
from bench.shared.throwaway_db import database_url
from engramdb.services.write.messages import ConversationMessage

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.support.scale_support import (  # noqa: E402
    conversation,
    processed_in_order,
    publish,
    serve_env,
    start_serve,
    stop,
    stored_messages,
    wait_for,
)

os.environ.setdefault("OMP_NUM_THREADS", "1")
READER = "reader"


@dataclass
class Config:
    pg_url: str
    nats_url: str
    data: Path
    agents: int
    per_agent: int
    idle_requests: int
    llm_url: str | None = None


@dataclass
class Sample:
    """One configuration, one run."""

    extractor: str
    processes: int
    rate: float  # messages/s to visible facts, no reads
    idle_ms: list[float] = field(default_factory=list)
    load_ms: list[float] = field(default_factory=list)
    load_rate: float = 0.0  # messages/s while retrieving
    out_of_order: int = 0
    load_average: float = 0.0


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s) + 0.5) - 1))] if s else float("nan")


def visible(pg_url: str, schema: str) -> int:
    """Messages whose fact is in ``mem_facts`` (an UPDATE adds a row: count messages, not rows)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        try:
            row = conn.execute(
                f'SELECT count(DISTINCT (agent_id, source_message_id)) FROM "{schema}".mem_facts'
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            return 0
    return int(row[0]) if row else 0


@contextlib.contextmanager
def serves(cfg: Config, processes: int) -> Iterator[tuple[str, str, list[int]]]:
    """``processes`` serves on a fresh schema + subject prefix; yields schema, prefix, HTTP ports."""
    schema, prefix = f"scale_{uuid.uuid4().hex[:8]}", f"sc{uuid.uuid4().hex[:8]}"
    with psycopg.connect(cfg.pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    env = serve_env(cfg.pg_url, cfg.nats_url, schema, prefix)
    if cfg.llm_url:  # after serve_env, which drops any LLM settings of the caller
        env.update(ENGRAMDB_LLM_BASE_URL=cfg.llm_url, ENGRAMDB_LLM_API_KEY="bench",
                   ENGRAMDB_LLM_MODEL="instant", ENGRAMDB_LLM_MAX_RETRIES="0")
    logs = [cfg.data / f"{schema}-{i}.log" for i in range(processes)]
    started = [start_serve(env, str(log)) for log in logs]
    try:
        wait_for(lambda: all(log.exists() and "ingest partition" in log.read_text(errors="replace")
                             for log in logs), 180, "serves consuming")
        for _proc, port in started:
            wait_for(lambda p=port: _ready(p), 120, "serve /readyz")
        time.sleep(3)  # the partitions spread over the processes
        yield schema, prefix, [port for _proc, port in started]
    finally:
        stop([proc for proc, _port in started])
        with psycopg.connect(cfg.pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


async def retrieve_loop(ports: list[int], until: asyncio.Event | None, count: int) -> list[float]:
    """One client, ``count`` retrieves (or until ``until`` is set), round-robin over ``ports``."""
    latencies: list[float] = []
    clients = [httpx.AsyncClient(base_url=f"http://127.0.0.1:{p}", timeout=30) for p in ports]
    try:
        i = 0
        while (until is None and i < count) or (until is not None and not until.is_set()):
            started = time.perf_counter()
            r = await clients[i % len(clients)].post(
                "/v1/retrieve", json={"agent_id": READER, "query": query(i)})
            r.raise_for_status()
            latencies.append((time.perf_counter() - started) * 1000)
            i += 1
    finally:
        for c in clients:
            await c.aclose()
    return latencies


async def stream(cfg: Config, schema: str, prefix: str, messages: list[ConversationMessage],
                 ports: list[int] | None) -> tuple[float, list[float]]:
    """Publish ``messages``; messages/s until all are visible (retrieving meanwhile if ``ports``)."""
    target = await asyncio.to_thread(visible, cfg.pg_url, schema) + len(messages)
    done = asyncio.Event()
    reads = asyncio.create_task(retrieve_loop(ports, done, 0)) if ports else None
    started = time.monotonic()
    await publish(cfg.nats_url, prefix, messages)
    deadline = started + 600
    while await asyncio.to_thread(visible, cfg.pg_url, schema) < target:
        if time.monotonic() > deadline:
            raise SystemExit(f"facts not visible after 600 s ({schema})")
        await asyncio.sleep(0.1)
    seconds = time.monotonic() - started
    done.set()
    return len(messages) / seconds, (await reads if reads else [])


def out_of_order(cfg: Config, schema: str, prefix: str, agents: list[str]) -> int:
    """Agents whose messages were not decided once each in publication order (ADR-0020)."""
    from engramdb.infra.settings import Settings
    from engramdb.services.memory.facade import Memory

    settings = Settings(database_url=cfg.pg_url, nats_url=cfg.nats_url, db_schema=schema,
                        embedding_model="hash-bow-384", subject_prefix=prefix)
    expected = [f"m{k}" for k in range(cfg.per_agent)]
    with Memory.open(settings, llm=None, quiet=True, start_projectors=False) as memory:
        return sum(processed_in_order(memory, a, cfg.per_agent) != expected for a in agents)


def measure(cfg: Config, extractor: str, processes: int) -> Sample:
    load = os.getloadavg()[0]
    tag = uuid.uuid4().hex[:4]
    first = [f"a{i}-{tag}" for i in range(cfg.agents)]
    second = [f"b{i}-{tag}" for i in range(cfg.agents)]
    seed = [ConversationMessage(agent_id=READER, message_id=f"r{i}", session_id="s", speaker=s, text=t)
            for i, (s, t) in enumerate(seed_messages(60))]
    with serves(cfg, processes) as (schema, prefix, ports):
        asyncio.run(publish(cfg.nats_url, prefix, seed))  # the reader's memory, to retrieve from
        wait_for(lambda: stored_messages(cfg.pg_url, schema) >= len(seed), 300, "the seed")
        rate, _ = asyncio.run(stream(cfg, schema, prefix, conversation(first, cfg.per_agent), None))
        idle, loaded, load_rate = [], [], 0.0
        if cfg.idle_requests:
            asyncio.run(retrieve_loop(ports, None, 3 * len(ports)))  # warm-up, not measured
            idle = asyncio.run(retrieve_loop(ports, None, cfg.idle_requests))
            load_rate, loaded = asyncio.run(
                stream(cfg, schema, prefix, conversation(second, cfg.per_agent), ports))
        else:
            second = []
        bad = out_of_order(cfg, schema, prefix, first + second)
    sample = Sample(extractor, processes, rate, idle, loaded, load_rate, bad, load)
    print(f"{extractor:7} processes={processes}: {rate:6.1f} msg/s  retrieve p95 idle "
          f"{pct(idle, 95):5.0f} ms / under writes {pct(loaded, 95):5.0f} ms ({len(loaded)} reads, "
          f"{load_rate:.1f} msg/s)  out of order {bad}  load {load:.1f}", flush=True)
    return sample


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def report(samples: list[Sample], figures: list[RebuildFigures]) -> str:
    lines: list[str] = []
    if samples:
        lines += ["(a) messages/s through NATS to visible facts (median over runs; × = vs 1 process)", "",
             "| extractor | serve processes | msg/s (runs) | median | × 1 process | agents out of order |",
             "|---|---:|---|---:|---:|---:|"]
    keys = sorted({(s.extractor, s.processes) for s in samples})
    med = {k: _median([s.rate for s in samples if (s.extractor, s.processes) == k]) for k in keys}
    for k in keys:
        runs = [s for s in samples if (s.extractor, s.processes) == k]
        base = med.get((k[0], 1), float("nan"))
        lines.append(f"| {k[0]} | {k[1]} | {' / '.join(f'{s.rate:.0f}' for s in runs)} | "
                     f"{med[k]:.0f} | {med[k] / base:.2f} | {sum(s.out_of_order for s in runs)} |")
    lines += [] if not samples else ["", "(b) retrieve p95 (HTTP, one client) idle vs while messages stream in",
              "", "| extractor | serve processes | p95 idle ms | p95 under writes ms | × idle "
              "| writes msg/s meanwhile |", "|---|---:|---:|---:|---:|---:|"]
    for k in keys:
        runs = [s for s in samples if (s.extractor, s.processes) == k]
        idle = _median([pct(s.idle_ms, 95) for s in runs])
        loaded = _median([pct(s.load_ms, 95) for s in runs])
        ratio = _median([pct(s.load_ms, 95) / pct(s.idle_ms, 95) for s in runs])
        lines.append(f"| {k[0]} | {k[1]} | {idle:.0f} | {loaded:.0f} | {ratio:.1f} | "
                     f"{_median([s.load_rate for s in runs]):.0f} |")
    if figures:
        lines += ["", "(c) rebuild of both projections (hash embedder; cold = every text embedded, "
                  "warm = embedding cache full)", "",
                  "| events | generate s | cold ev/s | warm ev/s | warm s (HNSW s) | peak RSS cold / warm MB |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for f in figures:
            lines.append(f"| {f.events:,} | {f.generate_seconds:.0f} | {f.cold_events_per_sec:,.0f} | "
                         f"{f.warm_events_per_sec:,.0f} | {f.warm_seconds:.1f} ({f.warm_index_seconds:.1f}) | "
                         f"{f.cold_peak_rss_mb:,.0f} / {f.warm_peak_rss_mb:,.0f} |")
    if samples:
        loads = [s.load_average for s in samples]
        lines += ["", f"box: {os.cpu_count()} cores, 1-min load average {min(loads):.1f}–{max(loads):.1f} "
                  "during the serve configurations"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", default="1,2,3", help="serve process counts (first = baseline, use 1)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--per-agent", type=int, default=6, help="messages per agent (≤ 6 distinct)")
    parser.add_argument("--extractors", default="offline,llm", help="offline, llm, or both")
    parser.add_argument("--idle-requests", type=int, default=60)
    parser.add_argument("--no-retrieve", action="store_true", help="(a) only: skip the retrieve phase")
    parser.add_argument("--rebuild", default="100000,300000",
                        help="rebuild sizes in events ('' skips; 1M: 100000,1000000)")
    parser.add_argument("--skip-serve", action="store_true", help="only the rebuild figures")
    args = parser.parse_args(argv)
    processes = [int(p) for p in args.processes.split(",")]
    extractors = [e for e in args.extractors.split(",") if e]
    samples: list[Sample] = []
    figures: list[RebuildFigures] = []
    data = Path(tempfile.mkdtemp(prefix="engramdb-scale-", dir="/tmp"))
    print(f"load average at start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)", flush=True)
    try:
        with database_url(None, "engramdb-scale-pg-") as pg_url, nats_server() as nats_url, \
                contextlib.ExitStack() as stack:
            llm_url = None
            if "llm" in extractors and not args.skip_serve:
                from bench.scale.instant_llm import answer
                from tests.support.fake_openai_server import run_fake_openai

                llm_url = str(stack.enter_context(run_fake_openai(answer)))
            for run in range(args.runs if not args.skip_serve else 0):
                for extractor in extractors:
                    for n in processes:
                        cfg = Config(pg_url, nats_url, data, args.agents, args.per_agent,
                                     0 if args.no_retrieve else args.idle_requests,
                                     llm_url if extractor == "llm" else None)
                        print(f"run {run + 1}: ", end="")
                        samples.append(measure(cfg, extractor, n))
            if samples:
                print(report(samples, []), flush=True)  # before the long rebuilds
            for size in [int(s) for s in args.rebuild.split(",") if s]:
                print(f"rebuild at {size:,} events (load {os.getloadavg()[0]:.1f}) ...", flush=True)
                try:
                    figures.append(rebuild_figures(pg_url, size))
                except (SystemExit, Exception) as exc:  # noqa: BLE001 - keep the other figures
                    print(f"  rebuild at {size:,} failed: {exc}", flush=True)
                    continue
                f = figures[-1]
                print(f"  {f.events:,} events: warm {f.warm_events_per_sec:,.0f} ev/s, cold "
                      f"{f.cold_events_per_sec:,.0f} ev/s, peak RSS {f.warm_peak_rss_mb:,.0f} MB", flush=True)
    finally:
        shutil.rmtree(data, ignore_errors=True)
    print()
    print(report(samples, figures))


if __name__ == "__main__":
    main()
