"""What per-agent encryption (ADR-0018) costs: ``python -m bench.write.crypto_overhead``.

1. the mapper alone (no database): ``to_stored_event`` + ``to_domain_event`` per event, for a
   fact event and a message event, plain (the library's mapper) vs encrypting (key cached);
2. the in-process write path (``bench.write.path.bench_in_process``'s loop: record save,
   aggregate, extraction on an instant scripted LLM, commit), encrypting vs plain (the same
   mapper with no key table attached), interleaved ``--runs`` times, medians reported.

Servers: ``ENGRAMDB_DATABASE_URL`` if set, else an embedded PostgreSQL in a throwaway dir.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _mapper_bench(n: int) -> dict[str, Any]:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from eventsourcing.application import Application

    from engramdb.domain.aggregate import AgentMemory, MessageRecord
    from engramdb.domain.keys import agent_aggregate_id
    from engramdb.domain.payloads import FactPayload
    from engramdb.infra.crypto_mapper import AgentCipherMapper
    from engramdb.infra.data_keys import DataKeys

    plain = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}).mapper
    sealed = AgentCipherMapper(transcoder=plain.transcoder)
    keys = object.__new__(DataKeys)  # a key table whose cache already holds the key
    keys._cache = {agent_aggregate_id("bench"): AESGCM(AESGCM.generate_key(bit_length=256))}  # noqa: SLF001
    sealed.keys = keys
    now = datetime.now(UTC)
    mem = AgentMemory(agent_id="bench")
    mem.register_entity("person:ana", "Ana", "person", "m1", {"by": "bench"})
    mem.add_fact(FactPayload(
        fact_id="f1", entity_key="person:ana", linked_entities=[], attribute_key="home",
        text="Ana lives in Porto Alegre with her two cats.", category="personal",
        confidence=0.9, importance=0.5, source_message_id="m1", source_message_ids=["m1"],
        speaker="Ana", valid_from=now, decided_by={"extractor": "llm", "model": "x"},
    ))
    fact = mem.collect_events()[-1]
    rec = MessageRecord(agent_id="bench", message_id="m1", session_id="s1", speaker="Ana",
                        text="I live in Porto Alegre with my two cats. " * 3, occurred_at=now,
                        metadata={})
    message = rec.collect_events()[0]
    out: dict[str, Any] = {}
    for name, event in (("fact_event", fact), ("message_event", message)):
        per: dict[str, float] = {}
        for label, mapper in (("plain", plain), ("encrypted", sealed)):
            best = float("inf")
            for _ in range(5):
                started = time.perf_counter()
                for _ in range(n):
                    mapper.to_domain_event(mapper.to_stored_event(event))
                best = min(best, (time.perf_counter() - started) / n * 1e6)
            per[f"{label}_us"] = round(best, 2)
        per["ratio"] = round(per["encrypted_us"] / per["plain_us"], 2)
        out[name] = per
    return out


def _write_bench(env: dict[str, str], n: int, runs: int) -> dict[str, Any]:
    from bench.write.path import _instant_llm
    from engramdb.domain.keys import agent_aggregate_id
    from engramdb.services.extraction import LLMExtractor
    from engramdb.services.memory.event_log import EventLog
    from engramdb.services.write.messages import ConversationMessage
    from engramdb.services.write.pipeline import WritePipeline

    def one(encrypted: bool) -> float:
        app = EventLog(env)
        if not encrypted:
            app.mapper.keys = None  # type: ignore[attr-defined]  # the plain path
        pipeline = WritePipeline(app, LLMExtractor(_instant_llm()))
        agents = [f"crypto-{uuid.uuid4().hex[:6]}-{a}" for a in range(4)]
        for agent in agents:  # cached keys in both modes: the erased-agent check is a dict hit
            app.keys.for_write(agent_aggregate_id(agent))
        durations = []
        try:
            for i in range(n + 20):
                result = pipeline.write(ConversationMessage(
                    agent_id=agents[i % 4], message_id=f"m{i}", speaker="Ana",
                    text=f"Message number {i} about my week in Porto Alegre.",
                ))
                if i >= 20:
                    durations.append(result.duration_ms)
        finally:
            app.close()
        return statistics.median(durations)

    plain, sealed = [], []
    one(True)  # warm-up (connections, statement plans), discarded
    for run in range(runs):  # alternate which goes first: the machine's noise is shared
        for encrypted in ((True, False) if run % 2 else (False, True)):
            (sealed if encrypted else plain).append(one(encrypted))
    p, s = statistics.median(plain), statistics.median(sealed)
    return {"messages": n, "runs": runs, "plain_ms_p50": round(p, 3),
            "encrypted_ms_p50": round(s, 3), "ratio": round(s / p, 3)}


def main() -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    report: dict[str, Any] = {"mapper": _mapper_bench(args.events)}
    tmp = Path(tempfile.mkdtemp(prefix="engramdb-crypto-"))
    handles: list[Any] = []
    try:
        from engramdb.infra.database import ensure_extensions, es_env_from_url

        url = os.environ.get("ENGRAMDB_DATABASE_URL")
        if not url:
            from engramdb.infra.embedded_postgres import ensure_postgres

            handle = ensure_postgres(tmp, fast_unsafe=True)
            handles.append(handle)
            url = handle.url
        ensure_extensions(url)
        report["write_path"] = _write_bench(es_env_from_url(url), args.messages, args.runs)
    finally:
        for handle in handles:
            handle.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
