"""One LLM-outage retrier per memory across processes (ADR-0029, issue 13).

Every ``serve`` with an LLM starts a retrier (ADR-0014); before the election each of them
probed a down LLM and re-extracted the same pending messages. Two retriers stand for two
``serve`` processes here: each has its own lease session, as a process would. The LLM is
``tests/support/fake_openai_server.py`` (real HTTP), refused while the messages are written.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import psycopg
from test_llm_outage import fact_texts, fake, memory, pending_now  # noqa: F401 - fixtures

from engramdb.services.management.retrier import ExtractionRetrier
from engramdb.services.memory.facade import Memory
from engramdb.services.observability.health import format_report
from tests.support.fake_openai_server import FakeOpenAI


def _until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _retrier(mem: Memory, pg_url: str, name: str) -> ExtractionRetrier:
    return ExtractionRetrier(mem.pipeline, mem.pool, interval_sec=0.2, leases=pg_url,
                             lease_scope=mem.schema, lease_poll=0.1, name=name)


def test_one_process_retries_and_a_standby_takes_over(
    memory: Memory, fake: FakeOpenAI, agent_id: str, pg_url: str  # noqa: F811 - fixtures
) -> None:
    fake.refuse()
    memory.write(agent_id, "I live in Porto.", speaker="Ana", message_id="m1")
    memory.write(agent_id, "I work at Globex.", speaker="Ana", message_id="m2")
    assert pending_now(memory, agent_id) == 2
    first = _retrier(memory, pg_url, "engramdb-retrier first").start()
    second = None
    try:
        _until(lambda: first.holding, 10, "the first retrier to take the lease")
        second = _retrier(memory, pg_url, "engramdb-retrier second").start()
        _until(lambda: first.rounds >= 4, 10, "the holder probing the down LLM")
        assert second.rounds == 0 and not second.holding  # standby: no probe of its own
        health = memory.health()
        assert health.extraction_retrier == "engramdb-retrier first"
        assert "extraction retrier: engramdb-retrier first" in format_report(health)

        # the holder dies: its thread stops and the server ends its session (as for kill -9)
        first._stop.set()
        assert first._thread is not None
        first._thread.join(5)
        rounds = first.rounds
        with psycopg.connect(pg_url, autocommit=True) as conn:
            killed = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                  " WHERE application_name = 'engramdb-retrier first'").fetchall()
        assert killed == [(True,)]
        _until(lambda: second.holding and second.rounds >= 2, 15, "the standby to take over")
        assert memory.health().extraction_retrier == "engramdb-retrier second"
        fake.restore()
        _until(lambda: pending_now(memory, agent_id) == 0, 20, "re-extraction by the new holder")
        assert first.rounds == rounds
        assert fact_texts(memory, agent_id) == ["Ana lives in Porto", "Ana works at Globex"]
    finally:
        first.stop()
        if second is not None:
            second.stop()
    assert memory.health().extraction_retrier is None  # stopped: nobody holds it
