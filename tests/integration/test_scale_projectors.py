"""Several processes on one memory (issue 13, ADR-0020): projectors elect one runner per
projection with a PostgreSQL advisory lock; the others stand by, answer read-your-writes from
the tracking tables, report ``standby`` (healthy), and take over when the holder goes.

Before the election two ``Memory`` instances on one database raced on the tracking tables
(``IntegrityError: Failed to record tracking for engramdb <n>``)."""

from __future__ import annotations

import time

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.memory.facade import Memory


def _open(env: dict[str, str]) -> Memory:
    return Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True)


def test_two_memories_share_one_database(fresh_schema, agent_id: str) -> None:
    _schema, env = fresh_schema("elect")
    first = _open(env)
    second = _open(env)
    closed = False
    try:
        assert all(s.running and not s.standby for s in first.projections.status().values())
        standby = second.projections.status()
        assert standby and all(s.standby and not s.running for s in standby.values()), standby
        health = second.health()
        assert health.ok, health.reasons
        assert all(p.standby for p in health.projections.values())

        positions = []
        for i in range(10):  # writes from both processes, read-your-writes in both
            mem = first if i % 2 else second
            written = mem.write(agent_id, f"I visited city number {i}.", speaker="Ana")
            mem.wait_for_projections(written.position, timeout=20)
            positions.append(written.position)
        assert second.retrieve(agent_id, "city number", wait_for=positions[-1]).facts
        assert all(p == positions[-1] for p in first.projections.positions().values())
        assert all(p == positions[-1] for p in second.projections.positions().values())

        first.close()  # the holder goes: the standby takes over within seconds
        closed = True
        started = time.monotonic()
        while not all(s.running for s in second.projections.status().values()):
            assert time.monotonic() - started < 10, second.projections.status()
            time.sleep(0.1)
        written = second.write(agent_id, "I moved to Lisbon.", speaker="Ana")
        second.wait_for_projections(written.position, timeout=20)
        assert second.health().ok
        assert all(s.restarts == 0 and not s.failing for s in second.projections.status().values())
    finally:
        if not closed:
            first.close()
        second.close()


def test_a_lost_lease_connection_stops_the_runner(fresh_schema, pg_url: str, agent_id: str) -> None:
    """The holder's lease session is killed (as a network cut or a server restart would): its
    locks are gone, so it must stop running its projections — one process runs each one
    afterwards (this one again or the standby), and nothing is applied twice."""
    import psycopg

    _schema, env = fresh_schema("lease")
    with _open(env) as first, _open(env) as second:
        holder_pid = first.projections._leases.run(lambda conn: conn.info.backend_pid)  # type: ignore[union-attr]
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (holder_pid,))

        def runners() -> dict[str, int]:
            both = [first.projections.status(), second.projections.status()]
            return {name: sum(s[name].running for s in both) for name in both[0]}

        started = time.monotonic()
        while True:  # the loss is noticed at the next ping (1 s), then someone takes over
            written = first.write(agent_id, f"I visited town {time.monotonic():.3f}.", speaker="Ana")
            if time.monotonic() - started > 2.5 and all(n == 1 for n in runners().values()):
                break
            assert time.monotonic() - started < 15, runners()
            time.sleep(0.2)
        first.wait_for_projections(written.position, timeout=20)
        second.wait_for_projections(written.position, timeout=20)
        assert first.health().ok and second.health().ok
