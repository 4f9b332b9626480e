"""Issue 28 item 3: ``engramdb mcp`` stops its embedded PostgreSQL on SIGTERM and SIGINT, on
both transports, and exits 0 — the probe saw it die with -15 and leave PostgreSQL running.

Real subprocess on the embedded default (its own data dir, so the PostgreSQL it starts is
its own); the server is "running" once that PostgreSQL is up (stdio opens memory as the
session starts) or its HTTP port answers.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from engramdb.infra.embedded_base import process_alive
from engramdb.infra.embedded_postgres import postgres_running
from tests.support.fault_harness import wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="engramdb-mcpstop-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    pid = postgres_running(path)
    if pid and process_alive(pid):
        psutil.Process(pid).kill()
    subprocess.run(["rm", "-rf", str(path)], check=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
        return True
    except httpx.TransportError:
        return False


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_mcp_stops_its_embedded_postgres(data_dir: Path, transport: str, sig: int) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAMDB_")}
    env.update(ENGRAMDB_DATA_DIR=str(data_dir), ENGRAMDB_EMBEDDING_MODEL="hash-bow-384",
               OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    port = _free_port()
    args = ["mcp"] if transport == "stdio" else ["mcp", "--transport", "http", "--port", str(port)]
    log = data_dir / "mcp.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engramdb.services.entrypoints.cli.main", *args],
            env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=out,
        )
    try:
        wait_for(lambda: proc.poll() is None and postgres_running(data_dir) is not None, 120,
                 "the embedded PostgreSQL")
        if transport == "http":
            wait_for(lambda: _answers(f"http://127.0.0.1:{port}/mcp"), 60, "the MCP port")
        pg_pid = postgres_running(data_dir)
        assert pg_pid is not None
        time.sleep(1)
        start = time.monotonic()
        proc.send_signal(sig)
        code = proc.wait(60)
        seconds = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = log.read_text(errors="replace")
    assert code == 0, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    wait_for(lambda: not process_alive(pg_pid), 15, "the embedded PostgreSQL stopped")
    print(f"mcp {transport} on {signal.Signals(sig).name}: exit 0 after {seconds:.1f} s")


async def test_mcp_restarts_its_killed_embedded_postgres(data_dir: Path) -> None:
    """A stdio MCP server on the embedded default brings its PostgreSQL back after ``kill -9``
    (``mcp/watched.py``): a tool call after the kill succeeds, without restarting the server,
    and the server still stops it when the session ends. It starts no NATS."""
    from mcp import Client, StdioServerParameters

    from engramdb.infra.embedded_nats import nats_running

    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAMDB_")}
    env.update(ENGRAMDB_DATA_DIR=str(data_dir), ENGRAMDB_EMBEDDING_MODEL="hash-bow-384",
               OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "engramdb.services.entrypoints.cli.main", "mcp"],
                                   env=env, cwd=str(ROOT))
    agent = "mcp-restart"
    async with Client(params, read_timeout_seconds=90) as client:
        first = await client.call_tool("write", {"agent_id": agent, "text": "I live in Recife."})
        assert not first.is_error, first.content
        pid = postgres_running(data_dir)
        assert pid is not None
        start = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not process_alive(pid), 10, "postgres down")
        wait_for(lambda: postgres_running(data_dir) not in (None, pid), 60, "postgres restarted by mcp")
        again = None
        for _ in range(30):  # the pools notice the dead connections on their next checkout
            again = await client.call_tool("write", {"agent_id": agent, "text": "I work at Acme."})
            if not again.is_error:
                break
            await asyncio.sleep(1)
        assert again is not None and not again.is_error, again.content if again else None
        found = await client.call_tool("retrieve", {"agent_id": agent, "query": "where do I live?"})
        assert not found.is_error and "Recife" in str(found.structured_content), found.content
        restarted = postgres_running(data_dir)
        print(f"mcp: embedded PostgreSQL killed -> a tool call answers again in {time.monotonic() - start:.1f} s")
    assert nats_running(data_dir) is None
    assert restarted is not None
    wait_for(lambda: not process_alive(restarted), 20, "the restarted PostgreSQL stopped with the session")
