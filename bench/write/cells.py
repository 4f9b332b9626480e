"""Writes into 1 cell vs 2 cells (ADR-0028), in one process, same database, same run.

Why: every insert into one event store takes that store's notification-log table lock
(eventsourcing's PostgreSQL recorder, ``LOCK TABLE ... IN EXCLUSIVE MODE``), so concurrent
writers of different agents queue on it; cells split that lock. Two workloads, ``--writers``
threads each owning its own agents:

- ``record``: stage 1 only (``record_many`` of one message: one insert transaction) — the log
  lock's share is largest here;
- ``write``: the full write pipeline (offline rule-based extractor, decisions, save).

Rounds alternate 1 cell / 2 cells; prints messages/s per round, the medians and the ratio
2 cells / 1 cell, and the load average (the box is shared: compare only within a run).

    python -m bench.write.cells [--writers 8] [--messages 400] [--rounds 5] [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
import uuid

import psycopg
from psycopg import sql

from bench.shared.throwaway_db import database_url
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.infra.settings import Settings
from engramdb.services.memory.facade import Memory
from engramdb.services.write.messages import ConversationMessage


def _round(memory: Memory, mode: str, writers: int, messages: int) -> float:
    """Messages/s for ``messages`` messages over ``writers`` threads (fresh agents)."""
    tag = uuid.uuid4().hex[:8]
    per = messages // writers
    barrier = threading.Barrier(writers + 1)

    def work(w: int) -> None:
        barrier.wait()
        for i in range(per):
            agent = f"bench-{tag}-{w}-{i % 4}"
            msg = ConversationMessage(agent_id=agent, message_id=f"m{i}", speaker="Ana",
                                      text=f"I live in City{w}x{i}.")
            pipeline = memory.cell(agent).pipeline
            if mode == "record":
                pipeline.record_many([msg])
            else:
                pipeline.write(msg)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    return per * writers / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with database_url(args.database_url, "engramdb-cells-") as url:
        bases = {n: f"cellbench{n}_{uuid.uuid4().hex[:6]}" for n in (1, 2)}
        memories = {n: Memory.open(Settings(cells=str(n), db_schema=base), database_url=url,
                                   embedder=HashEmbedder(384), llm=None, quiet=True,
                                   start_projectors=False)
                    for n, base in bases.items()}
        try:
            for memory in memories.values():
                memory.rebuild()  # an empty log: creates the read-model tables pre-retrieval reads
            load_before = os.getloadavg()[0]
            for mode in ("record", "write"):
                rates: dict[int, list[float]] = {1: [], 2: []}
                _round(memories[1], mode, args.writers, args.writers * 4)  # warm-up
                _round(memories[2], mode, args.writers, args.writers * 4)
                for _ in range(args.rounds):
                    for n in (1, 2):
                        rates[n].append(_round(memories[n], mode, args.writers, args.messages))
                med = {n: statistics.median(r) for n, r in rates.items()}
                for n in (1, 2):
                    runs = " ".join(f"{r:.0f}" for r in rates[n])
                    print(f"{mode:6s} {n} cell(s): {med[n]:7.0f} msg/s median  (runs {runs})")
                print(f"{mode:6s} 2 cells / 1 cell: {med[2] / med[1]:.2f}x")
            print(f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        finally:
            for memory in memories.values():
                memory.close()
            with psycopg.connect(url, autocommit=True) as conn:
                for n, base in bases.items():
                    for schema in ([base] if n == 1 else [f"{base}_cell0", f"{base}_cell1"]):
                        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                            sql.Identifier(schema)))


if __name__ == "__main__":
    main()
