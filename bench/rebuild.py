"""Rebuild throughput: events/s of a full bulk rebuild of both projections from the log.

Generates ``--facts`` FactAdded events fast (``--batch`` facts per save, spread over
``--agents`` agents, plus one message record per save), then rebuilds: once with a cold
embedding cache (every text embedded by the hash test embedder) and ``--runs`` times with a
warm cache (zero embed calls: what a rebuild costs by itself). Reports the median.

    python -m bench.rebuild [--facts 100000] [--runs 3]

Database: ``ENGRAMDB_DATABASE_URL`` if set, else the embedded server; a fresh schema is
created and dropped. Embedder: ``HashEmbedder`` (hashing test double, 384-d).
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import UTC, datetime, timedelta

from bench.aggregate_cost import BY, bench_schema
from engramdb.domain.aggregate import MessageRecord
from engramdb.domain.payloads import FactPayload
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.projections.embeddings import CountingEmbedder
from engramdb.projections.rebuild import RebuildReport, rebuild
from engramdb.services.app import MemoryApplication

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def generate(app: MemoryApplication, facts: int, agents: int, batch: int) -> int:
    per_agent = facts // agents
    k = 0
    for a in range(agents):
        agent = f"bench-{a}"
        mem = app.agent_memory(agent)
        mem.register_entity("person:user", "User", "person", None, BY)
        for start in range(0, per_agent, batch):
            msg = f"{agent}-m{start}"
            rec = MessageRecord(
                agent_id=agent,
                message_id=msg,
                session_id=None,
                speaker="user",
                text=f"message {msg}",
                occurred_at=T0,
                metadata={},
            )
            for i in range(start, min(per_agent, start + batch)):
                k += 1
                mem.add_fact(
                    FactPayload(
                        fact_id=f"f{i}",
                        entity_key="person:user",
                        linked_entities=[],
                        attribute_key=None,
                        text=f"fact {k} of agent {a}: likes item {i}",
                        category="general",
                        confidence=0.8,
                        importance=0.5,
                        source_message_id=msg,
                        source_message_ids=[msg],
                        speaker="user",
                        valid_from=T0 + timedelta(seconds=i),
                        decided_by=BY,
                    )
                )
            app.save(mem, rec)
    return k


def line(label: str, r: RebuildReport) -> str:
    return (
        f"{label}: {r.events} events in {r.seconds:.1f}s = {r.events_per_sec:,.0f} ev/s "
        f"(read+fold {r.read_seconds:.1f}s, embed {r.embed_seconds:.1f}s [{r.texts_embedded} "
        f"texts], write {r.write_seconds - r.index_seconds:.1f}s, HNSW {r.index_seconds:.1f}s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--facts", type=int, default=100_000)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with bench_schema("bench_rb") as (_, env):
        app = MemoryApplication({**env, "IS_SNAPSHOTTING_ENABLED": "n"})
        t = time.perf_counter()
        n = generate(app, args.facts, args.agents, args.batch)
        print(f"generated {n} facts in {time.perf_counter() - t:.1f}s")
        app.close()
        cold = rebuild(MemoryApplication, env, CountingEmbedder(HashEmbedder()))
        print(line("cold cache", cold))
        warm = []
        for _ in range(args.runs):
            counting = CountingEmbedder(HashEmbedder())
            report = rebuild(MemoryApplication, env, counting)
            assert counting.calls == 0
            warm.append(report)
            print(line("warm cache", report))
        median = statistics.median(r.events_per_sec for r in warm)
        print(f"rebuild throughput, warm cache, median of {args.runs}: {median:,.0f} events/s")


if __name__ == "__main__":
    main()
