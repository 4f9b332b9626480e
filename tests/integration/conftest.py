"""Shared server fixtures: ONE real PostgreSQL (pgvector) and ONE real NATS JetStream per run.

Servers are the embedded ones (throwaway data dir under /tmp, fsync off for speed) unless
``ENGRAMDB_TEST_DATABASE_URL`` / ``ENGRAMDB_TEST_NATS_URL`` point at existing servers.
Isolation between tests comes from unique agent ids (``agent_id``) or unique schemas
(``fresh_schema``), not from fresh servers. Keep this file about servers only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import psutil
import psycopg
import pytest
from psycopg import sql

from engramdb.infra.database import ensure_extensions, es_env_from_url
from engramdb.infra.embedded_nats import ensure_nats, nats_running
from engramdb.infra.embedded_postgres import ensure_postgres, postgres_running


class FreshSchema(NamedTuple):
    schema: str
    env: dict[str, str]


@pytest.fixture(scope="session")
def embedded_data_dir() -> Iterator[Path]:
    """Session data dir for the embedded servers (under /tmp: as root the server user must be
    able to traverse its parents, which pytest's 0700 ``pytest-of-root`` would forbid)."""
    path = Path(tempfile.mkdtemp(prefix="engramdb-test-", dir="/tmp"))
    yield path
    _stop_servers_under(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def no_default_data_dir(embedded_data_dir: Path) -> Iterator[None]:
    """Every engramdb the run starts without a data dir of its own finds the session's: code
    that falls back to the default (a CLI command that needs NATS, say) would otherwise start
    servers in the user's real ``~/.local/share/engramdb`` (``/var/lib/engramdb`` as root) —
    a second NATS for the run, and the tests writing into someone's memory."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ENGRAMDB_DATA_DIR", str(embedded_data_dir))
        yield


def _stop_servers_under(path: Path) -> None:
    """Stop any server still running from ``path`` before it is deleted. A test that opened
    a second handle on the session servers (e.g. ``Settings(data_dir=embedded_data_dir)``)
    keeps them claimed past the fixtures' own release; its ``atexit`` release then finds the
    data dir gone and cannot tell which server was its, so the server would outlive the run."""
    mine = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if any(str(path) in arg for arg in cmdline):
            mine.append(proc)
    for proc in mine:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _gone, alive = psutil.wait_procs(mine, timeout=10)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


@pytest.fixture(scope="session")
def pg_url(embedded_data_dir: Path) -> Iterator[str]:
    external = os.environ.get("ENGRAMDB_TEST_DATABASE_URL")
    if external:
        ensure_extensions(external)
        yield external
        return
    handle = ensure_postgres(embedded_data_dir, fast_unsafe=True)
    ensure_extensions(handle.url)
    yield handle.url
    if postgres_running(embedded_data_dir) is None:
        _note_a_death("PostgreSQL", handle.pgdata / "server.log")
    handle.stop()


@pytest.fixture(scope="session")
def nats_url(embedded_data_dir: Path) -> Iterator[str]:
    external = os.environ.get("ENGRAMDB_TEST_NATS_URL")
    if external:
        yield external
        return
    handle = ensure_nats(embedded_data_dir)
    yield handle.url
    if nats_running(embedded_data_dir) is None:
        _note_a_death("NATS", embedded_data_dir / "run" / "nats-server.log")
    handle.stop()


_DEATHS: list[str] = []


def _note_a_death(server: str, log_path: Path) -> None:
    """Keep what a session server that died during the run left behind — its log's tail and
    the disk's free space — before the data dir is deleted: every test after the death fails
    on a refused connection, and without this the cause (a full disk, a crash) is lost."""
    tail = log_path.read_text(errors="replace").splitlines()[-40:] if log_path.exists() else ["(no log)"]
    free_mib = shutil.disk_usage(log_path.parent if log_path.parent.exists() else "/").free // 2**20
    _DEATHS.append(f"the session's embedded {server} was not running at the end of the run "
                   f"({free_mib} MiB free on its disk now); the tail of {log_path}:\n" + "\n".join(tail))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for text in _DEATHS:
        terminalreporter.write_sep("=", "a session server died")
        terminalreporter.write_line(text)


@pytest.fixture
def es_env(pg_url: str) -> dict[str, str]:
    """eventsourcing env (PERSISTENCE_MODULE + POSTGRES_*), a fresh dict per test."""
    return es_env_from_url(pg_url)


@pytest.fixture
def fresh_schema(pg_url: str) -> Iterator[Callable[..., FreshSchema]]:
    """Factory: ``schema, env = fresh_schema()`` creates a unique schema (dropped after the
    test); ``env`` is ``es_env`` plus ``POSTGRES_SCHEMA``."""
    created: list[str] = []

    def make(prefix: str = "t") -> FreshSchema:
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        created.append(name)
        return FreshSchema(name, es_env_from_url(pg_url, name))

    yield make
    if created:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for name in created:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
                )
