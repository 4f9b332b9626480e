"""Issue 28 item 4: ``serve`` on the embedded default restarts its PostgreSQL and its NATS
when they are killed (``kill -9``), by itself — the probe saw ``/readyz`` 503 forever until
another CLI command started them — counts it in ``/metrics`` and still stops cleanly.

Real ``serve`` subprocess on its own data dir (the servers are its own), real kills.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from engramdb.infra.embedded_base import process_alive
from engramdb.infra.embedded_nats import nats_running
from engramdb.infra.embedded_postgres import postgres_running
from tests.support.fault_harness import REPO, Serve, wait_for


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="engramdb-restart-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    for pid in (postgres_running(path), nats_running(path)):
        if pid and process_alive(pid):
            psutil.Process(pid).kill()
    subprocess.run(["rm", "-rf", str(path)], check=False)


def _restarts(serve: Serve, server: str) -> float:
    with urllib.request.urlopen(serve.base + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    line = next(x for x in text.splitlines()
                if x.startswith(f'engramdb_embedded_restarts_total{{server="{server}"}}'))
    return float(line.split()[-1])


def test_serve_restarts_its_killed_embedded_servers(data_dir: Path) -> None:
    serve = Serve.start(data_dir / "serve.log", ENGRAMDB_DATA_DIR=str(data_dir))
    figures = []
    try:
        wait_for(lambda: serve.get("/readyz")[0] == 200, 60, "ready")
        assert _restarts(serve, "postgres") == 0 and _restarts(serve, "nats") == 0
        for server, running in (("postgres", postgres_running), ("nats", nats_running)):
            pid = running(data_dir)
            assert pid is not None
            start = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not process_alive(pid), 10, f"{server} down")  # noqa: B023
            wait_for(lambda: running(data_dir) not in (None, pid), 60,  # noqa: B023
                     f"{server} restarted by serve")
            wait_for(lambda: serve.get("/readyz")[0] == 200, 60, f"ready after {server} kill")
            figures.append(f"{server} {time.monotonic() - start:.1f} s")
            assert _restarts(serve, server) == 1
        status, body = serve.post("/v1/messages", {"agent_id": "restart-a",
                                                    "text": "I live in Recife."})
        assert status == 200, body
        status, body = serve.post("/v1/retrieve", {"agent_id": "restart-a",
                                                    "query": "where do I live?"})
        assert status == 200, body
        # status tells who runs what: serve (paused here, so it cannot restart yet) uses it
        os.kill(serve.proc.pid, signal.SIGSTOP)
        try:
            pid = postgres_running(data_dir)
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not process_alive(pid), 10, "postgres down")
            env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAMDB_")}
            out = subprocess.run(
                [sys.executable, "-m", "engramdb.services.entrypoints.cli.main", "status"],
                env={**env, "ENGRAMDB_DATA_DIR": str(data_dir)}, capture_output=True, text=True,
                timeout=60, cwd=REPO,
            )
        finally:
            os.kill(serve.proc.pid, signal.SIGCONT)
        told = out.stdout + out.stderr
        assert f"`engramdb serve` (pid {serve.proc.pid}) uses it" in told, told
        assert "start it with" not in told, told
        wait_for(lambda: serve.get("/readyz")[0] == 200, 60, "ready after the paused kill")
        assert _restarts(serve, "postgres") == 2
        pids = [postgres_running(data_dir), nats_running(data_dir)]
        code, _ = serve.terminate(timeout=60)
    finally:
        serve.kill()
    assert code == 0, serve.log_tail()
    assert "restarted" in serve.log_path.read_text()
    # the restarted servers are released with serve: the last claim stops them
    wait_for(lambda: not any(p and process_alive(p) for p in pids), 20, "servers stopped")
    print("embedded server killed → ready again: " + ", ".join(figures))
