"""Self-healing against real servers: projectors restarted after database errors, the NATS
retrieve responder back after an outage, ``/readyz`` honest in between.

Each fault is real: a PostgreSQL of the test's own stopped and started under a live
``Memory``; a read-model table that refuses writes (a trigger raising); a ``nats-server``
process of the test's own stopped and started on the same port.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from faststream.nats import NatsBroker
from psycopg import sql

from engramdb.infra.embedded_base import pick_port, wait_until
from engramdb.infra.embedded_nats import nats_server_binary
from engramdb.infra.embedded_postgres import PostgresHandle, ensure_postgres
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.nats.retrieve import create_retrieve_broker, request_retrieve
from engramdb.services.memory.facade import Memory

# fast restarts; "recovered" only after 2 s up, so a loaded machine's slow re-fail is no flake
FAST_BACKOFF = {"initial_backoff": 0.05, "max_backoff": 0.5, "healthy_after": 2.0}


def _open(**kwargs: object) -> Memory:
    return Memory.open(embedder=HashEmbedder(384), llm=None, quiet=True, **kwargs)  # type: ignore[arg-type]


def _until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    assert wait_until(predicate, timeout, 0.05), f"timed out after {timeout}s waiting for {what}"


@pytest.fixture
def own_postgres() -> Iterator[tuple[Path, list[PostgresHandle]]]:
    """A PostgreSQL only this test uses (so stopping it hurts nobody); handles[-1] is live."""
    data_dir = Path(tempfile.mkdtemp(prefix="engramdb-heal-", dir="/tmp"))
    handles = [ensure_postgres(data_dir, fast_unsafe=True)]
    yield data_dir, handles
    for handle in handles:
        handle.stop()
    shutil.rmtree(data_dir, ignore_errors=True)


def test_projectors_restart_after_a_postgres_crash(own_postgres, agent_id: str, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="engramdb.projections.supervisor")
    data_dir, handles = own_postgres
    memory = _open(database_url=handles[0].url)
    try:
        first = memory.write(agent_id, "I live in Recife.", speaker="Ana")
        memory.wait_for_projections(first.position, timeout=20)
        assert memory.health().ok

        handles[0].stop()  # the crash: every connection of every projector is cut
        _until(lambda: not any(memory.projections.alive().values()), 10, "projectors to die")
        report = memory.health(timeout=0.5)
        assert not report.ok and report.database.status == "down"

        # while it is down, restarts fail fast and are retried with backoff
        _until(lambda: "'memory' could not restart (failure 2" in caplog.text, 10, "a retry")
        handles.append(ensure_postgres(data_dir, fast_unsafe=True))  # back, same port
        assert handles[-1].url == handles[0].url
        _until(lambda: all(memory.projections.alive().values()), 15, "projectors to restart")

        later = memory.write(agent_id, "I work at Vertix.", speaker="Ana")
        memory.pool.check()  # drop the read pool's connections to the dead server
        result = memory.retrieve(agent_id, "Where does Ana work?", wait_for=later.position)
        assert "Vertix" in result.context
        status = memory.projections.status()
        assert all(s.restarts >= 1 for s in status.values()), status
        assert "OperationalError" in (status["memory"].last_error or "")
        _until(lambda: memory.health().ok, 10, "/readyz to turn green")
        scraped = memory.metrics.exposition().decode()
        restarts = status["memory"].restarts
        assert f'engramdb_projector_restarts_total{{projection="memory"}} {restarts:.1f}' in scraped
        logged = caplog.text
        assert "projection 'memory' stopped (failure 1: OperationalError" in logged
        assert "projection 'memory' restarted (restart 1)" in logged
    finally:
        memory.close()


@pytest.fixture
def memory(fresh_schema) -> Iterator[Memory]:
    _schema, env = fresh_schema("heal")
    mem = _open(env=env)
    mem.projections.stop()  # restart the projectors with a fast backoff (the test's clock)
    mem.projections.supervisor_options = FAST_BACKOFF
    mem.projections.__enter__()
    yield mem
    mem.close()


def test_a_failing_read_model_is_reported_retried_and_recovers(
    memory: Memory, pg_url: str, agent_id: str
) -> None:
    first = memory.write(agent_id, "I live in Recife.", speaker="Ana")
    memory.wait_for_projections(first.position, timeout=20)
    table = sql.Identifier(memory.schema, "mem_messages")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'read model refuses writes'; END $$"
            ).format(sql.Identifier(memory.schema, "refuse"))
        )
        conn.execute(
            sql.SQL("CREATE TRIGGER refuse BEFORE INSERT ON {} FOR EACH ROW EXECUTE FUNCTION {}()")
            .format(table, sql.Identifier(memory.schema, "refuse"))
        )
        later = memory.write(agent_id, "I work at Vertix.", speaker="Ana")

        def failing_again() -> bool:
            state = memory.projections.status()["conversation"]
            return state.restarts >= 2 and state.failing

        _until(failing_again, 15, "the conversation projector to fail, restart and fail again")
        report = memory.health()
        assert not report.ok
        assert any("conversation" in r and "refuses writes" in r for r in report.reasons), report
        assert report.projections["conversation"].lag > 0
        assert "refuses writes" in (report.projections["conversation"].last_error or "")
        with pytest.raises(TimeoutError, match="refuses writes"):
            memory.wait_for_projections(later.position, timeout=0.5)

        conn.execute(sql.SQL("DROP TRIGGER refuse ON {}").format(table))
    memory.wait_for_projections(later.position, timeout=20)  # the same events, applied once
    _until(lambda: memory.health().ok, 10, "health to recover")
    rows = memory.retrieve(agent_id, "Vertix", wait_for=later.position)
    assert "Vertix" in rows.context


# ----- NATS ------------------------------------------------------------------------------------


class _NatsServer:
    """A nats-server process of this test's own, restartable on the same port."""

    def __init__(self, workdir: Path) -> None:
        self.port = pick_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [str(nats_server_binary()), "-a", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=(self.workdir / "nats.log").open("ab"),
        )
        _until(self._accepts, 10, "nats-server to listen")

    def _accepts(self) -> bool:
        import socket

        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


@pytest.fixture
def own_nats() -> Iterator[_NatsServer]:
    workdir = Path(tempfile.mkdtemp(prefix="engramdb-heal-nats-", dir="/tmp"))
    server = _NatsServer(workdir)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(workdir, ignore_errors=True)


async def _ask(url: str, agent_id: str) -> str | None:
    client = NatsBroker(url)
    await client.connect()
    try:
        reply = await request_retrieve(client, {"agent_id": agent_id, "query": "Vertix"}, timeout=5)
    finally:
        await client.stop()
    assert reply.error is None, reply.error
    assert reply.result is not None
    return reply.result.context


async def test_nats_retrieve_answers_again_after_an_outage(
    own_nats: _NatsServer, memory: Memory, agent_id: str
) -> None:
    """The responder reconnects however long the outage: with nats-py's default of 60
    attempts it would give up after 60 x reconnect_time_wait (here 0.05 s: 3 s < outage)."""
    written = memory.write(agent_id, "I work at Vertix.", speaker="Ana")
    memory.wait_for_projections(written.position, timeout=20)
    responder = create_retrieve_broker(memory, own_nats.url, reconnect_time_wait=0.05)
    await responder.start()
    try:
        assert "Vertix" in (await _ask(own_nats.url, agent_id) or "")

        own_nats.stop()
        memory.nats_url = own_nats.url
        assert not (await asyncio.to_thread(memory.health, None, 0.5)).ok  # NATS down
        await asyncio.sleep(4.5)
        own_nats.start()

        deadline = time.monotonic() + 15
        while True:  # the responder resubscribes once its reconnect lands
            try:
                context = await _ask(own_nats.url, agent_id)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        assert "Vertix" in (context or "")
        assert (await asyncio.to_thread(memory.health)).ok
    finally:
        await responder.stop()
