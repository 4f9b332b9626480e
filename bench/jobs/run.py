"""Cost of the sleep-time jobs per agent (ADR-0019): seconds per job at 1k / 10k / 100k facts.

For each size: one agent with ``n`` facts spread over 20 entities (linked in a ring of
relationships, so connectivity is not trivial), ``n / 2`` retrieval notices of 10 facts each
on the feedback stream (every 100th fact gives its subject a "home": 20 contradictions; all
facts recent: 20 recurring topics), then the first pass (``feedback`` consumes every notice,
``consolidation`` finds the patterns, ``importance`` assesses every fact; ADR-0022:
``vitality`` scores every fact, ``communities`` runs Louvain on the 20-entity graph,
``profiles`` writes 20 template profiles), the projection
of the job events, and a second pass on unchanged memory (idempotent: no event). No LLM is
called by any job.

    python -m bench.jobs.run [--sizes 1000 10000]      # add 100000 for the 100k row (ADR-0030;
                                                   # ~30 min on the shared 2-core box)

Database and NATS: ``ENGRAMDB_DATABASE_URL`` / ``ENGRAMDB_NATS_URL`` if set, else the
embedded servers; a fresh schema and a fresh subject prefix, both dropped/unused after.
Embedder: ``HashEmbedder`` (hashing test double, 384-d).
"""

from __future__ import annotations

import argparse
import time
import uuid
from datetime import UTC, datetime, timedelta

from bench.write.aggregate_cost import BY, bench_schema
from engramdb.domain.aggregate import MessageRecord
from engramdb.domain.payloads import FactPayload
from engramdb.infra.database import resolve_nats
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.infra.settings import Settings
from engramdb.services.jobs import JobContext, select
from engramdb.services.jobs.feedback_stream import FeedbackPublisher
from engramdb.services.jobs.runner import run_pass
from engramdb.services.memory.facade import Memory

T0 = datetime(2024, 1, 1, tzinfo=UTC)
NOW = datetime.now(UTC)
ENTITIES = 20
FLUSH_EVERY = 2000  # well under the publisher's queue size, so no notice is dropped


def generate(memory: Memory, agent: str, n: int, batch: int = 1000) -> int:
    mem = memory.app.agent_memory(agent)
    keys = [f"person:p{e}" for e in range(ENTITIES)]
    for e, key in enumerate(keys):
        mem.register_entity(key, f"P{e}", "person", None, BY)
    for e, key in enumerate(keys):
        mem.observe_relationship(key, keys[(e + 1) % ENTITIES], "knows", None, T0)
    position = 0
    for start in range(0, n, batch):
        msg = f"m{start}"
        rec = MessageRecord(agent_id=agent, message_id=msg, session_id=None, speaker="user",
                            text=f"message {msg}", occurred_at=T0, metadata={})
        for i in range(start, min(n, start + batch)):
            mem.add_fact(FactPayload(
                fact_id=f"f{i}", entity_key=keys[i % ENTITIES],
                linked_entities=[keys[(i + 3) % ENTITIES]] if i % 4 == 0 else [],
                attribute_key="home" if i % 100 == 0 else None,
                text=f"fact {i}: P{i % ENTITIES} likes item {i}",
                category="general", confidence=0.8, importance=0.5, source_message_id=msg,
                source_message_ids=[msg], speaker="user", valid_from=NOW - timedelta(seconds=i),
                decided_by=BY,
            ))
        position = memory.app.save(mem, rec)[-1].notification.id
    return position


def one_size(n: int, nats_url: str) -> dict[str, float]:
    with bench_schema("bench_jobs") as (_, env), \
            Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as memory:
        agent = f"bench-{n}"
        # the set-up's projection (n facts embedded) is not what is measured: at 100k on the
        # shared box it took over 10 min (ADR-0030), so its wait grows with n
        memory.wait_for_projections(generate(memory, agent, n), timeout=max(600.0, n * 0.05))
        prefix = f"bench{uuid.uuid4().hex[:8]}"
        publisher = FeedbackPublisher(nats_url, prefix)
        for k in range(n // 2):
            publisher.notify(agent, [f"f{(k * 7 + j) % n}" for j in range(10)])
            if k % FLUSH_EVERY == FLUSH_EVERY - 1:  # the queue is bounded: a full one drops
                publisher.flush(120)
        publisher.flush(120)
        publisher.close()
        ctx = JobContext(memory, nats_url=nats_url, prefix=prefix, timeout_sec=3600)
        out: dict[str, float] = {"notices_sent": publisher.sent, "dropped": publisher.dropped}
        for name in ("feedback", "consolidation", "importance", "vitality", "communities",
                     "profiles"):
            start = time.perf_counter()
            runs = run_pass(ctx, select(name), [agent])
            out[f"{name}_s"] = time.perf_counter() - start
            out[f"{name}_events"] = runs[0].events
            assert runs[0].status == "ok", runs
        start = time.perf_counter()
        memory.wait_for_projections(timeout=600)
        out["project_s"] = time.perf_counter() - start
        start = time.perf_counter()
        again = run_pass(ctx, select(None), [agent])
        out["idempotent_pass_s"] = time.perf_counter() - start
        out["idempotent_events"] = sum(r.events for r in again)
        return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    args = parser.parse_args()
    nats_url = resolve_nats(Settings())
    for n in args.sizes:
        r = one_size(n, nats_url)
        print(f"{n:>7} facts: feedback {r['feedback_s']:.2f}s ({r['notices_sent']:.0f} notices, "
              f"{r['dropped']:.0f} dropped, "
              f"{r['feedback_events']:.0f} event), consolidation {r['consolidation_s']:.2f}s "
              f"({r['consolidation_events']:.0f} patterns), importance {r['importance_s']:.2f}s "
              f"({r['importance_events']:.0f} event), vitality {r['vitality_s']:.2f}s "
              f"({r['vitality_events']:.0f} event), communities {r['communities_s']:.2f}s "
              f"({r['communities_events']:.0f}), profiles {r['profiles_s']:.2f}s "
              f"({r['profiles_events']:.0f}), projecting them {r['project_s']:.2f}s, "
              f"second pass {r['idempotent_pass_s']:.2f}s ({r['idempotent_events']:.0f} events), "
              "0 LLM calls")


if __name__ == "__main__":
    main()
