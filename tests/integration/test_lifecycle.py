"""``engramdb serve`` stops cleanly on SIGTERM (systemd, Docker): in-flight messages are
drained (written and acked), projectors stopped, the embedded PostgreSQL and NATS it started
are released and stop with it, and the exit status is 0. Real subprocess, real servers."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from engramdb.infra.embedded_base import process_alive, read_json
from engramdb.infra.embedded_nats import ensure_nats, nats_running
from engramdb.infra.embedded_postgres import ensure_postgres, postgres_running
from engramdb.infra.nats_auth import load_users, with_credentials
from tests.support.fault_harness import (
    Serve,
    assert_all_processed_once,
    consumer_state,
    counts,
    publish,
    wait_for,
    workload,
)

N, AGENTS = 300, 4


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="engramdb-life-", dir="/tmp"))
    yield path
    for pid in (postgres_running(path), nats_running(path)):  # never leak a server
        if pid:
            psutil.Process(pid).kill()
    subprocess.run(["rm", "-rf", str(path)], check=False)


def _embedded_urls(data_dir: Path) -> tuple[str, str]:
    """The URLs of serve's embedded servers, read from its state (no claim of our own)."""
    pg = read_json(data_dir / "run" / "postgres.json")
    nc = read_json(data_dir / "run" / "nats.json")
    service = load_users(data_dir)["service"]  # the embedded NATS requires credentials
    return (
        f"postgresql://postgres:{pg['password']}@127.0.0.1:{pg['port']}/postgres",
        with_credentials(f"nats://127.0.0.1:{nc['port']}", service["user"], service["password"]),
    )


def test_sigterm_drains_ingest_and_releases_embedded_servers(data_dir: Path) -> None:
    serve = Serve.start(data_dir / "serve.log", ENGRAMDB_DATA_DIR=str(data_dir))
    try:
        pg_pid, nats_pid = postgres_running(data_dir), nats_running(data_dir)
        assert pg_pid and nats_pid
        db_url, nats_url = _embedded_urls(data_dir)
        publish(nats_url, workload(N, AGENTS, "life"))
        wait_for(
            lambda: counts(db_url, "public").processed_records >= N // 5, 60, "ingest under way"
        )
        code, seconds = serve.terminate(timeout=60)
    finally:
        serve.kill()
    assert code == 0, serve.log_tail()
    assert seconds < 30, f"SIGTERM took {seconds:.1f} s"
    print(f"SIGTERM mid-ingest: exit {code} after {seconds:.1f} s")
    # the embedded servers serve started (and nobody else claimed) are gone
    # (pg_ctl stop returns once postmaster.pid is gone, a moment before the process exits)
    wait_for(lambda: not any(map(process_alive, (pg_pid, nats_pid))), 10, "servers gone")
    assert postgres_running(data_dir) is None and nats_running(data_dir) is None

    # drained: nothing was left delivered-but-unacked; all that was acked is in the log
    with ensure_nats(data_dir) as nats_handle, ensure_postgres(data_dir) as pg_handle:
        pending, ack_pending = consumer_state(nats_handle.url)
        stopped_at = counts(pg_handle.url, "public")
    assert ack_pending == 0, "in-flight messages were not drained before exit"
    assert stopped_at.processed_records == N - pending, (stopped_at, pending)

    # a restart processes the rest: every published message exactly once
    serve = Serve.start(data_dir / "serve.log", ENGRAMDB_DATA_DIR=str(data_dir))
    try:
        db_url, nats_url = _embedded_urls(data_dir)
        assert_all_processed_once(serve, db_url, "public", nats_url, N)
        code, _ = serve.terminate(timeout=60)
    finally:
        serve.kill()
    assert code == 0, serve.log_tail()
    assert postgres_running(data_dir) is None and nats_running(data_dir) is None
