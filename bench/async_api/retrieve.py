"""Retrieve through ``AsyncMemory`` vs ``Memory`` at 1 / 10 / 50 concurrent callers, one run,
one memory (issue 24, ADR-0047).

    python -m bench.async_api.retrieve [--messages 400] [--calls 300] [--levels 1,10,50]
                                       [--rounds 3] [--embedder default|hash]
                                       [--database-url URL]

The memory is written through the real pipeline (the offline extractor) from a fixed set of
sentences about a few dozen people; queries cycle over questions about them. ``sync``: N
threads, each calling ``Memory.retrieve``; ``async``: N asyncio tasks on one event loop, each
awaiting ``AsyncMemory.retrieve`` over the same ``Memory`` (the pools are shared). The two
alternate within each round (the order flips per round) so the box's load moves both. Per
level: per-call p50 / p95 (ms) and throughput (calls/s), median over rounds, and the async /
sync ratios. The embedder is the configured default (the offline model) unless ``hash``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from bench.shared.throwaway_db import database_url  # noqa: E402
from engramdb.infra.providers.scripted import HashEmbedder  # noqa: E402
from engramdb.services.memory.async_facade import AsyncMemory  # noqa: E402
from engramdb.services.memory.facade import Memory  # noqa: E402

PEOPLE = ["Ana", "Bruno", "Carla", "Davi", "Elena", "Felipe", "Gabi", "Hugo", "Iris", "Joao",
          "Karin", "Lucas", "Marta", "Nuno", "Olga", "Paulo", "Rita", "Sergio", "Tania", "Vitor"]
PLACES = ["Recife", "Porto", "Lisbon", "Olinda", "Braga", "Natal", "Belem", "Faro"]
ORGS = ["Acme", "Vertix", "Globex", "Initech", "Umbrella", "Hooli"]
HOBBIES = ["jazz", "chess", "hiking", "the piano", "football", "painting", "surfing"]
AGENT = "bench-async"


def sentences(n: int) -> list[tuple[str, str]]:
    out = []
    for i in range(n):
        who = PEOPLE[i % len(PEOPLE)]
        kind = (i // len(PEOPLE)) % 3
        if kind == 0:
            out.append((who, f"I live in {PLACES[i % len(PLACES)]}."))
        elif kind == 1:
            out.append((who, f"I work at {ORGS[i % len(ORGS)]}."))
        else:
            out.append((who, f"I love {HOBBIES[i % len(HOBBIES)]}."))
    return out


def queries() -> list[str]:
    return [q for p in PEOPLE for q in (f"Where does {p} live?", f"Where does {p} work?",
                                        f"What does {p} love?")]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_sync(memory: Memory, level: int, calls: int, qs: list[str]) -> tuple[list[float], float]:
    latencies: list[float] = []
    lock = threading.Lock()
    counter = iter(range(calls))

    def worker() -> None:
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            t0 = time.perf_counter()
            memory.retrieve(AGENT, qs[i % len(qs)])
            ms = (time.perf_counter() - t0) * 1000
            with lock:
                latencies.append(ms)

    threads = [threading.Thread(target=worker) for _ in range(level)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, calls / (time.perf_counter() - started)


def run_async(memory: Memory, level: int, calls: int, qs: list[str]) -> tuple[list[float], float]:
    async def main() -> tuple[list[float], float]:
        facade = AsyncMemory(memory, max_threads=max(level, 1), owns_memory=False)
        latencies: list[float] = []
        counter = iter(range(calls))

        async def worker() -> None:
            for i in counter:
                t0 = time.perf_counter()
                await facade.retrieve(AGENT, qs[i % len(qs)])
                latencies.append((time.perf_counter() - t0) * 1000)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(level)))
        rate = calls / (time.perf_counter() - started)
        await facade.close()
        return latencies, rate

    return asyncio.run(main())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=400)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--levels", default="1,10,50")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--embedder", choices=["default", "hash"], default="default")
    ap.add_argument("--database-url")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    with database_url(args.database_url, "engramdb-bench-async-") as url:
        kwargs: dict[str, Any] = {"database_url": url, "llm": None, "quiet": True}
        if args.embedder == "hash":
            kwargs["embedder"] = HashEmbedder(384)
        with Memory.open(**kwargs) as memory:
            t0 = time.perf_counter()
            last = 0
            for who, text in sentences(args.messages):
                last = memory.write(AGENT, text, speaker=who).position
            memory.wait_for_projections(last, timeout=300)
            facts = len(memory.list_facts(AGENT, limit=500).items)
            print(f"memory: {args.messages} messages, {facts}+ active facts, written in "
                  f"{time.perf_counter() - t0:.1f} s; embedder {args.embedder}; "
                  f"load {os.getloadavg()[0]:.2f}")
            qs = queries()
            run_sync(memory, 1, 20, qs)  # warm both paths (caches, pools, model)
            run_async(memory, 1, 20, qs)
            table: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
            for r in range(args.rounds):
                order: list[tuple[str, Callable[..., tuple[list[float], float]]]] = [
                    ("sync", run_sync), ("async", run_async)]
                if r % 2:
                    order.reverse()
                for level in levels:
                    for name, fn in order:
                        lat, rate = fn(memory, level, args.calls, qs)
                        table.setdefault((name, level), []).append(
                            (pct(lat, 0.5), pct(lat, 0.95), rate))
            print(f"load after {os.getloadavg()[0]:.2f}; {args.rounds} rounds x {args.calls} calls")
            print("| callers | sync p50 / p95 ms | async p50 / p95 ms | sync calls/s | "
                  "async calls/s | async/sync p50 | async/sync calls/s |")
            print("|---:|---:|---:|---:|---:|---:|---:|")
            for level in levels:
                s = [statistics.median(x) for x in zip(*table[("sync", level)], strict=True)]
                a = [statistics.median(x) for x in zip(*table[("async", level)], strict=True)]
                print(f"| {level} | {s[0]:.1f} / {s[1]:.1f} | {a[0]:.1f} / {a[1]:.1f} | "
                      f"{s[2]:.1f} | {a[2]:.1f} | {a[0] / s[0]:.2f} | {a[2] / s[2]:.2f} |")


if __name__ == "__main__":
    main()
