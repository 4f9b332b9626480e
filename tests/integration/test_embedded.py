"""Embedded servers against the real binaries: lifecycle, reuse, crash recovery, features."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import psycopg
import pytest

from engramdb.infra.database import ensure_extensions, es_env_from_url, resolve_database
from engramdb.infra.embedded import EmbeddedServers
from engramdb.infra.embedded_base import EmbeddedServerError, wait_until
from engramdb.infra.embedded_nats import ensure_nats, nats_running
from engramdb.infra.embedded_postgres import ensure_postgres, postgres_running, shared_buffers_mb
from engramdb.infra.settings import Settings

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A private data dir under /tmp (world-traversable parents, short socket path)."""
    path = Path(tempfile.mkdtemp(prefix="engramdb-emb-", dir="/tmp"))
    yield path
    # fast_unsafe below = fsync off: a kill -9 loses nothing (the OS still has the pages)
    for pid in (postgres_running(path), nats_running(path)):  # never leak a server
        if pid:
            os.kill(pid, signal.SIGKILL)
    subprocess.run(["rm", "-rf", str(path)], check=False)


def _query(url: str, q: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(q)
        return cur.fetchall() if cur.description else []


def test_postgres_start_stop_restart_keeps_data(data_dir: Path) -> None:
    h = ensure_postgres(data_dir, fast_unsafe=True)
    assert h.started and postgres_running(data_dir) == h.pid
    _query(h.url, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('hello')")
    h.stop()
    assert postgres_running(data_dir) is None
    h.stop()  # idempotent

    h2 = ensure_postgres(data_dir, fast_unsafe=True)
    assert h2.started and h2.pid != h.pid
    assert (h2.port, h2.password) == (h.port, h.password)  # stable URL across runs
    assert _query(h2.url, "SELECT v FROM kept") == [("hello",)]
    if h2.socket_dir is not None:  # the unix socket works too
        dsn = f"host={h2.socket_dir} port={h2.port} user={h2.user} dbname={h2.dbname}"
        assert _query(dsn, "SELECT 1") == [(1,)]
    h2.stop()


def test_postgres_recovers_from_kill_9(data_dir: Path) -> None:
    h = ensure_postgres(data_dir, fast_unsafe=True)
    _query(h.url, "CREATE TABLE survived (v int); INSERT INTO survived VALUES (42)")
    os.kill(h.pid, signal.SIGKILL)
    assert wait_until(lambda: postgres_running(data_dir) is None, 10)
    assert (data_dir / "pg" / "postmaster.pid").exists()  # stale lock left behind

    h2 = ensure_postgres(data_dir, fast_unsafe=True)
    assert h2.started and h2.pid != h.pid
    assert _query(h2.url, "SELECT v FROM survived") == [(42,)]
    h.stop()  # the dead server's handle must not stop the new server
    assert postgres_running(data_dir) == h2.pid
    h2.stop()
    assert postgres_running(data_dir) is None


def test_second_process_reuses_running_servers(data_dir: Path) -> None:
    pg = ensure_postgres(data_dir, fast_unsafe=True)
    nc = ensure_nats(data_dir)
    child = (
        "import sys; from engramdb.infra.embedded_postgres import ensure_postgres;"
        "from engramdb.infra.embedded_nats import ensure_nats;"
        f"p = ensure_postgres({str(data_dir)!r}); n = ensure_nats({str(data_dir)!r});"
        "print(p.pid, p.started, n.pid, n.started)"
    )
    out = subprocess.run(
        [sys.executable, "-c", child],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert out == [str(pg.pid), "False", str(nc.pid), "False"]
    # the child released its handles at exit; we still hold ours, so both servers live on
    assert postgres_running(data_dir) == pg.pid and nats_running(data_dir) == nc.pid
    assert _query(pg.url, "SELECT 1") == [(1,)]

    same = ensure_postgres(data_dir, fast_unsafe=True)  # in-process reuse is reference counted too
    assert not same.started and same.url == pg.url
    pg.stop()
    assert postgres_running(data_dir) == same.pid
    same.stop()
    nc.stop()
    assert postgres_running(data_dir) is None and nats_running(data_dir) is None


async def test_nats_restart_and_kill_9_keep_jetstream_data(data_dir: Path) -> None:
    h = ensure_nats(data_dir)
    nc = await nats.connect(h.url)
    js = nc.jetstream()
    await js.add_stream(name="KEEP", subjects=["keep.>"])
    await js.publish("keep.a", b"1")
    await nc.close()
    os.kill(h.pid, signal.SIGKILL)
    assert wait_until(lambda: nats_running(data_dir) is None, 10)

    h2 = ensure_nats(data_dir)
    assert h2.started and h2.pid != h.pid
    nc = await nats.connect(h2.url)
    info = await nc.jetstream().stream_info("KEEP")
    await nc.close()
    assert info.state.messages == 1
    h.stop()
    h2.stop()
    assert nats_running(data_dir) is None


def test_pgvector_at_least_0_8(pg_url: str) -> None:
    versions = ensure_extensions(pg_url)  # idempotent on the session server
    major, minor = (int(x) for x in versions["vector"].split(".")[:2])
    assert (major, minor) >= (0, 8)
    assert _query(pg_url, "SELECT '[1,2]'::vector <=> '[2,4]'::vector") == [(0.0,)]


async def test_jetstream_publish_and_consume(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        name = f"T{uuid.uuid4().hex[:8]}"
        await js.add_stream(name=name, subjects=[f"{name}.>"])
        ack = await js.publish(f"{name}.x", b"payload")
        assert ack.stream == name and ack.seq == 1
        sub = await js.pull_subscribe(f"{name}.x", durable="c1")
        msgs = await sub.fetch(1, timeout=5)
        assert [m.data for m in msgs] == [b"payload"]
        await msgs[0].ack()
        await js.delete_stream(name)
    finally:
        await nc.close()


def test_es_env_drives_eventsourcing(fresh_schema: object, agent_id: str) -> None:
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate

    class Note(Aggregate):
        def __init__(self, text: str) -> None:
            self.text = text

    schema, env = fresh_schema()  # type: ignore[operator]
    assert (
        env["POSTGRES_SCHEMA"] == schema and env["PERSISTENCE_MODULE"] == "eventsourcing.postgres"
    )
    app: Application[Any] = Application(env=env)
    note = Note(agent_id)
    app.save(note)
    assert app.repository.get(note.id).text == agent_id
    app.close()


def test_resolve_database_prefers_external_url() -> None:
    cfg = resolve_database(
        Settings(database_url="postgresql://u:p%40ss@db.example:6543/mem", db_schema="cell1")
    )
    assert cfg.handle is None
    assert cfg.env == {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": "mem",
        "POSTGRES_HOST": "db.example",
        "POSTGRES_PORT": "6543",
        "POSTGRES_USER": "u",
        "POSTGRES_PASSWORD": "p@ss",
        "POSTGRES_SCHEMA": "cell1",
    }
    assert "POSTGRES_SCHEMA" not in es_env_from_url(cfg.url)


def test_embedded_servers_context_manager(data_dir: Path) -> None:
    with EmbeddedServers(Settings(data_dir=data_dir)) as servers:
        assert servers.database.handle is not None
        assert _query(
            servers.database.url, "SELECT extname FROM pg_extension WHERE extname='vector'"
        )
        assert servers.nats_url.startswith("nats://engramdb:")  # the service identity (ADR-0011)
        assert servers.nats_url.split("@")[1].startswith("127.0.0.1:")
    assert postgres_running(data_dir) is None and nats_running(data_dir) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="root-only behaviour")
def test_root_refuses_untraversable_parent_without_chmod() -> None:
    private = Path(tempfile.mkdtemp(prefix="engramdb-private-", dir="/tmp"))  # mode 0700
    try:
        with pytest.raises(EmbeddedServerError, match="will not chmod"):
            ensure_postgres(private / "deep" / "data")
        assert private.stat().st_mode & 0o777 == 0o700  # a user's home stays closed
        assert not (private / "deep").exists()  # checked before creating anything
    finally:
        subprocess.run(["rm", "-rf", str(private)], check=False)


def test_the_embedded_server_gets_an_eighth_of_memory_for_shared_buffers(pg_url: str) -> None:
    """ADR-0038: between PostgreSQL's default 128 MB and 1 GB, an eighth of the machine."""
    assert shared_buffers_mb(1 << 30) == 128 and shared_buffers_mb(4 << 30) == 512
    assert shared_buffers_mb(64 << 30) == 1024
    if os.environ.get("ENGRAMDB_TEST_DATABASE_URL"):
        pytest.skip("an external server keeps its own settings")
    with psycopg.connect(pg_url) as conn:
        pages = conn.execute("SELECT setting::int * 8 / 1024 FROM pg_settings WHERE name = 'shared_buffers'")
        assert pages.fetchone() == (shared_buffers_mb(),)  # the setting is in 8 kB pages
