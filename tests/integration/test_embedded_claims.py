"""Claims on embedded servers across processes (ADR-0002, ADR-0015): when one process restarts
a crashed server, another live process's claim survives, so the server is not stopped under
it; only a dead owner's claim is pruned."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from engramdb.infra.embedded_base import wait_until
from engramdb.infra.embedded_nats import ensure_nats, nats_running
from engramdb.infra.embedded_postgres import ensure_postgres, postgres_running

REPO = Path(__file__).resolve().parents[2]

# A second engramdb process: claims both servers, reports their pids, then holds its claims
# until its stdin closes (and releases them at exit like any engramdb process).
HOLDER = """
import sys
from engramdb.infra.embedded_nats import ensure_nats
from engramdb.infra.embedded_postgres import ensure_postgres
pg = ensure_postgres(sys.argv[1], fast_unsafe=True)
nc = ensure_nats(sys.argv[1])
print(pg.pid, nc.pid, flush=True)
sys.stdin.read()
"""


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="engramdb-claims-", dir="/tmp"))
    yield path
    for pid in (postgres_running(path), nats_running(path)):  # never leak a server
        if pid:
            os.kill(pid, signal.SIGKILL)
    subprocess.run(["rm", "-rf", str(path)], check=False)


def _holder(data_dir: Path) -> tuple[subprocess.Popen[str], int, int]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(data_dir)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    pg_pid, nats_pid = (int(x) for x in proc.stdout.readline().split())
    return proc, pg_pid, nats_pid


def test_restart_by_another_process_keeps_the_live_owners_claim(data_dir: Path) -> None:
    holder, pg_pid, nats_pid = _holder(data_dir)
    try:
        os.kill(pg_pid, signal.SIGKILL)  # both servers crash under the holder
        os.kill(nats_pid, signal.SIGKILL)
        assert wait_until(
            lambda: postgres_running(data_dir) is None and nats_running(data_dir) is None, 10
        )
        pg = ensure_postgres(data_dir, fast_unsafe=True)  # this process restarts them
        nc = ensure_nats(data_dir)
        assert pg.started and nc.started
        claims = {p.name.split("-")[0] for p in (data_dir / "run").glob("*-clients/*.json")}
        assert str(holder.pid) in claims  # the holder's claim survived the restart
        pg.stop()
        nc.stop()
        # the holder still uses them: releasing ours must not stop them under it
        assert postgres_running(data_dir) == pg.pid
        assert nats_running(data_dir) == nc.pid
    finally:
        assert holder.stdin is not None
        holder.stdin.close()  # the holder exits and releases its claims: last one out stops
        assert holder.wait(timeout=60) == 0
    assert postgres_running(data_dir) is None and nats_running(data_dir) is None


def test_a_dead_owners_claim_is_pruned_on_restart(data_dir: Path) -> None:
    holder, pg_pid, nats_pid = _holder(data_dir)
    holder.kill()  # owner and servers die; the owner's claims stay on disk
    holder.wait(timeout=10)
    os.kill(pg_pid, signal.SIGKILL)
    os.kill(nats_pid, signal.SIGKILL)
    assert wait_until(
        lambda: postgres_running(data_dir) is None and nats_running(data_dir) is None, 10
    )
    assert list((data_dir / "run").glob("*-clients/*.json"))  # stale claims left behind
    pg = ensure_postgres(data_dir, fast_unsafe=True)
    nc = ensure_nats(data_dir)
    claims = {p.name.split("-")[0] for p in (data_dir / "run").glob("*-clients/*.json")}
    assert claims == {str(os.getpid())}  # the dead owner's claims are gone
    pg.stop()
    nc.stop()  # so the last live owner stops both
    assert postgres_running(data_dir) is None and nats_running(data_dir) is None
