"""Cost of saving one message's decisions (message record + 3 facts) as the agent grows.

The agent aggregate is loaded for every message, so its cost must not grow with the number of
facts it holds (target: ≤ 2× between 100 and 50k facts). Measured in one process, same
database: median over ``--saves`` saves of the full write step (load from cache/repository,
decide, save) at ~100 facts and at ~50k facts.

    python -m bench.write.aggregate_cost [--facts 50000] [--saves 50]

Database: ``ENGRAMDB_DATABASE_URL`` if set, else the embedded server (``infra``); a fresh
schema is created and dropped.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg import sql

from engramdb.domain.aggregate import MessageRecord
from engramdb.domain.payloads import FactPayload
from engramdb.infra.database import ensure_extensions, es_env_from_url, resolve_database
from engramdb.infra.settings import Settings
from engramdb.services.memory.event_log import EventLog

T0 = datetime(2024, 1, 1, tzinfo=UTC)
BY = {"extractor": "bench"}


@contextmanager
def bench_schema(prefix: str) -> Iterator[tuple[str, dict[str, str]]]:
    """A throwaway schema on the configured (or embedded) PostgreSQL."""
    db = resolve_database(Settings(), fast_unsafe=False)
    ensure_extensions(db.url)
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db.url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield db.url, es_env_from_url(db.url, name)
    finally:
        with psycopg.connect(db.url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))


def fact(fid: str, i: int, msg: str) -> FactPayload:
    return FactPayload(
        fact_id=fid,
        entity_key="person:user",
        linked_entities=[],
        attribute_key=None,
        text=f"the user said thing number {i}",
        category="general",
        confidence=0.8,
        importance=0.5,
        source_message_id=msg,
        source_message_ids=[msg],
        speaker="user",
        valid_from=T0 + timedelta(seconds=i),
        decided_by=BY,
    )


def grow(app: EventLog, agent: str, facts: int, batch: int = 1000) -> None:
    mem = app.agent_memory(agent)
    if not mem.has_entity("person:user"):
        mem.register_entity("person:user", "User", "person", None, BY)
    n = len(mem.active_facts)
    while n < facts:
        for i in range(n, min(facts, n + batch)):
            mem.add_fact(fact(f"g{i}", i, f"g{i // batch}"))
        n = min(facts, n + batch)
        app.save(mem)


def one_message(app: EventLog, agent: str, k: int) -> float:
    started = time.perf_counter()
    mem = app.agent_memory(agent)
    rec = MessageRecord(
        agent_id=agent,
        message_id=f"bench-{k}",
        session_id=None,
        speaker="user",
        text=f"message {k}",
        occurred_at=T0,
        metadata={},
    )
    for j in range(3):
        mem.add_fact(fact(f"b{k}-{j}", 10_000_000 + k * 3 + j, f"bench-{k}"))
    rec.complete({"extractor": "bench"}, {}, None, None, 0, {"ADD": 3})
    app.save(mem, rec)
    return time.perf_counter() - started


def measure(app: EventLog, agents: list[str], saves: int) -> list[float]:
    """Median save time per agent; saves are interleaved so background work on the server
    (autovacuum, checkpoints after the growth phase) hits both sizes alike."""
    times: list[list[float]] = [[] for _ in agents]
    for agent in agents:
        one_message(app, agent, -1)  # warm the cache
    for k in range(saves):
        for i, agent in enumerate(agents):
            times[i].append(one_message(app, agent, k))
    return [statistics.median(t) for t in times]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--facts", type=int, default=50_000)
    parser.add_argument("--saves", type=int, default=50)
    args = parser.parse_args()
    with bench_schema("bench_agg") as (_, env):
        app = EventLog(env)
        small, large = f"small-{uuid.uuid4().hex[:6]}", f"large-{uuid.uuid4().hex[:6]}"
        grow(app, small, 100)
        t = time.perf_counter()
        grow(app, large, args.facts)
        print(f"grew {args.facts} facts in {time.perf_counter() - t:.1f}s")
        at_small, at_large = measure(app, [small, large], args.saves)
        # and cold: a fresh application (empty cache) loads the large agent from its snapshot
        cold_app = EventLog(env)
        t = time.perf_counter()
        cold_app.agent_memory(large)
        cold_load = time.perf_counter() - t
        cold_app.close()
        app.close()
    print(f"save of 1 message (record + 3 facts), median of {args.saves}:")
    print(f"  at 100 facts:    {at_small * 1000:.2f} ms")
    print(f"  at {args.facts} facts: {at_large * 1000:.2f} ms")
    print(f"  ratio: {at_large / at_small:.2f}x (target <= 2x)")
    print(
        f"  cold load of the {args.facts}-fact agent (snapshot + tail): {cold_load * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
