"""Issue 28 items 3 and 5: ``serve`` exits 0 on SIGTERM in every state of its servers (ADR-0015) —
NATS down, PostgreSQL down, both down — with no traceback in its log.

The probe's case: SIGTERM while NATS was down exited 1 with a ``ConnectionReconnectingError``
traceback from ``broker.stop()``. Each scenario here owns its PostgreSQL and NATS (started by
the test, named to ``serve`` by URL, so serve does not restart them: they are not its own),
kills what it names with SIGKILL, and then stops ``serve``. Real subprocesses, real servers.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import psutil
import pytest

from engramdb.infra.embedded_base import process_alive
from engramdb.infra.embedded_nats import ensure_nats, nats_running
from engramdb.infra.embedded_postgres import ensure_postgres, postgres_running
from engramdb.services.write.messages import deadletter_stream_name
from tests.support.fault_harness import REPO, Serve, wait_for


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="engramdb-stop-", dir="/tmp"))
    path.chmod(0o755)  # as root, the PostgreSQL system user must traverse it
    yield path
    for sub in ("serve", "pg", "nats"):  # never leak a server
        for pid in (postgres_running(path / sub), nats_running(path / sub)):
            if pid and process_alive(pid):
                psutil.Process(pid).kill()
    subprocess.run(["rm", "-rf", str(path)], check=False)


@pytest.mark.parametrize("down", [("nats",), ("postgres",), ("nats", "postgres")],
                         ids=["nats-down", "postgres-down", "both-down"])
def test_sigterm_exits_0_whatever_is_down(workdir: Path, down: tuple[str, ...]) -> None:
    pg = ensure_postgres(workdir / "pg", stop_on_exit=False)
    nc = ensure_nats(workdir / "nats", stop_on_exit=False)
    serve = Serve.start(workdir / "serve.log", ENGRAMDB_DATA_DIR=str(workdir / "serve"),
                        ENGRAMDB_DATABASE_URL=pg.url, ENGRAMDB_NATS_URL=nc.url)
    try:
        assert serve.get("/readyz")[0] == 200
        pids = {"postgres": pg.pid, "nats": nc.pid}
        for name in down:
            os.kill(pids[name], signal.SIGKILL)
        wait_for(lambda: not any(process_alive(pids[n]) for n in down), 10, "servers down")
        time.sleep(3)  # serve notices: reconnect loops, failing pools
        code, seconds = serve.terminate(timeout=60)
    finally:
        serve.kill()
        for handle in (pg, nc):
            if process_alive(handle.pid):
                handle.stop()
    log = serve.log_path.read_text(errors="replace")
    assert code == 0, serve.log_tail()
    assert "Traceback" not in log, serve.log_tail(80)
    assert seconds < 40, f"SIGTERM took {seconds:.1f} s"
    print(f"SIGTERM with {'+'.join(down)} down: exit {code} after {seconds:.1f} s")


def test_serve_follows_the_key_file(workdir: Path, pg_url: str, fresh_schema: Any) -> None:
    """Issue 28 item 5 on a real serve: started open (no key file), it requires keys from the
    first ``engramdb keys create`` on, and a second key works without a restart."""
    schema, _env = fresh_schema("keys")
    nc = ensure_nats(workdir / "nats", stop_on_exit=False)
    data = workdir / "serve"
    serve = Serve.start(workdir / "serve.log", ENGRAMDB_DATA_DIR=str(data),
                        ENGRAMDB_DATABASE_URL=pg_url, ENGRAMDB_DB_SCHEMA=schema,
                        ENGRAMDB_NATS_URL=nc.url)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAMDB_")}
    env["ENGRAMDB_DATA_DIR"] = str(data)

    def create(agents: str, scope: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "engramdb.services.entrypoints.cli.main", "keys", "create",
             "--agents", agents, "--scope", scope],
            env=env, capture_output=True, text=True, timeout=60, cwd=REPO, check=True,
        )
        return next(w for w in out.stdout.split() if w.startswith("edb_"))

    def get(path: str, key: str | None) -> int:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        req = urllib.request.Request(serve.base + path, headers=headers)
        return Serve._call(req)[0]

    async def dead_letter_max_age() -> float:
        conn = await nats.connect(nc.url)
        try:
            info = await conn.jetstream().stream_info(deadletter_stream_name())
            return float(info.config.max_age or 0)
        finally:
            await conn.close()

    try:
        # issue 28: the dead-letter stream (payloads inline) is bounded, 30 days by default
        assert asyncio.run(dead_letter_max_age()) == 30 * 86400
        assert get("/v1/agents", None) == 200  # open: no key file yet
        admin = create("*", "admin")
        assert get("/v1/agents", None) == 401  # closed from the next request
        assert get("/v1/agents", admin) == 200
        reader = create("team-a:*", "read")
        assert get("/v1/agents/team-a:x/facts", reader) == 200  # no restart
        assert get("/v1/agents/team-b:x/facts", reader) == 403
        code, _ = serve.terminate(timeout=60)
    finally:
        serve.kill()
        nc.stop()
    assert code == 0, serve.log_tail()
