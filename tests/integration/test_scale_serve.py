"""Three ``engramdb serve`` processes and the Python API on one memory (issue 13, ADR-0020).

Messages for 50 agents go through NATS; one serve is killed with SIGKILL mid-run. Every message
must be processed exactly once (no message decided twice, no duplicate fact), each agent's
messages in publication order (its log shows m0..m5 in order), the read models equal a rebuild
from the log, and the ``Memory`` opened here beside the running serves neither errors (it used
to: two projectors raced on one tracking table) nor misses writes — its own write is visible
through a serve's HTTP API and the serves' writes through it.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
from test_ingest import run_async
from test_rebuild import dump

from engramdb.infra.settings import Settings
from engramdb.services.memory.facade import Memory
from tests.support.scale_support import (
    conversation,
    duplicate_facts,
    processed_in_order,
    publish,
    serve_env,
    start_serve,
    stop,
    wait_for,
)

AGENTS, PER_AGENT = 50, 6


def test_three_serves_one_killed_and_the_python_api(
    pg_url: str, nats_url: str, fresh_schema, tmp_path: Path
) -> None:
    schema, _env = fresh_schema("scale")
    prefix = f"s{uuid.uuid4().hex[:8]}"
    env = serve_env(pg_url, nats_url, schema, prefix)
    logs = [tmp_path / f"serve{i}.log" for i in range(3)]
    started = [start_serve(env, str(log)) for log in logs]
    procs = [proc for proc, _port in started]
    agents = [f"agent{i:02d}-{uuid.uuid4().hex[:6]}" for i in range(AGENTS)]
    expected = [f"m{k}" for k in range(PER_AGENT)]
    settings = Settings(database_url=pg_url, nats_url=nats_url, db_schema=schema,
                        embedding_model="hash-bow-384", subject_prefix=prefix)
    try:
        # every serve consumes some partitions before anything is published
        wait_for(lambda: all("ingest partition" in log.read_text(errors="replace") for log in logs
                             if log.exists()) and all(log.exists() for log in logs), 60, "three consumers")
        with Memory.open(settings, llm=None, quiet=True) as memory:  # a fourth process's API
            run_async(publish(nats_url, prefix, conversation(agents, PER_AGENT)))
            wait_for(lambda: sum(len(processed_in_order(memory, a, PER_AGENT)) for a in agents[:10]) >= 10,
                     60, "the first messages")
            # SIGKILL the projectors' runner (it consumes partitions too): its leases go with its
            # sessions, a standby takes the projections over, its unacked messages come again
            victim = next(i for i, log in enumerate(logs) if "standing by" not in log.read_text(errors="replace"))
            procs[victim].kill()
            procs[victim].wait()

            own = memory.write("python-api-agent", "I live in Quito.", speaker="Ana")
            memory.wait_for_projections(own.position, timeout=30)
            port = started[(victim + 1) % 3][1]
            seen = httpx.post(f"http://127.0.0.1:{port}/v1/retrieve", timeout=30,
                              json={"agent_id": "python-api-agent", "query": "Quito", "wait_for": own.position})
            assert seen.status_code == 200 and "Quito" in seen.text, seen.text

            wait_for(lambda: all(len(processed_in_order(memory, a, PER_AGENT)) >= PER_AGENT for a in agents),
                     90, "every message of every agent")
            for agent in agents:
                assert processed_in_order(memory, agent, PER_AGENT) == expected, agent
            assert duplicate_facts(pg_url, schema) == []
            memory.wait_for_projections(timeout=30)
            assert memory.health().ok, memory.health().reasons

            stop(procs)  # then rebuild here: the read models must equal the log's replay
            before = {k: v for k, v in dump(pg_url, schema).items() if not k.endswith("_tracking")}
            memory.rebuild()
            after = {k: v for k, v in dump(pg_url, schema).items() if not k.endswith("_tracking")}
            assert after == before
        texts = [log.read_text(errors="replace") for log in logs]
        assert not any("IntegrityError" in text for text in texts)
        assert any("taken over by this process" in text for text in texts)  # the projectors moved
    finally:
        stop(procs)
