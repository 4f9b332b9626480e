"""Helpers of the scale-out tests (issue 13, ADR-0020): ``serve`` subprocesses on the test's
servers, a conversation for many agents with a sequence number per agent, and the checks that
every message was processed once and in order."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from engramdb.services.entrypoints.nats.publisher import MessagePublisher
from engramdb.services.write.messages import ConversationMessage

CITIES = ["Recife", "Porto", "Lisbon", "Madrid", "Paris", "Berlin"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve_env(pg_url: str, nats_url: str, schema: str, prefix: str, **extra: str) -> dict[str, str]:
    env = {**os.environ, "ENGRAMDB_DATABASE_URL": pg_url, "ENGRAMDB_NATS_URL": nats_url,
           "ENGRAMDB_DB_SCHEMA": schema, "ENGRAMDB_EMBEDDING_MODEL": "hash-bow-384",
           "ENGRAMDB_SUBJECT_PREFIX": prefix, "ENGRAMDB_INGEST_PARTITIONS": "6", "OMP_NUM_THREADS": "1",
           **extra}
    for key in ("ENGRAMDB_LLM_API_KEY", "ENGRAMDB_LLM_BASE_URL"):
        env.pop(key, None)
    return env


def start_serve(env: dict[str, str], log_path: str) -> tuple[subprocess.Popen[bytes], int]:
    """``engramdb serve`` (role all) on its own HTTP port (returned); output to ``log_path``."""
    port = free_port()
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engramdb.services.entrypoints.cli.main", "serve"],
            env={**env, "ENGRAMDB_HTTP_PORT": str(port)}, stdout=out, stderr=subprocess.STDOUT,
        )
    return proc, port


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def conversation(agents: list[str], per_agent: int) -> list[ConversationMessage]:
    """Agents interleaved; agent ``a``'s k-th message is ``m<k>``: "I live in <CITIES[k]>."."""
    return [
        ConversationMessage(agent_id=agent, message_id=f"m{k}", session_id="s", speaker="Ana",
                            text=f"I live in {CITIES[k % len(CITIES)]}.")
        for k in range(per_agent) for agent in agents
    ]


async def publish(nats_url: str, prefix: str, messages: list[ConversationMessage]) -> None:
    async with MessagePublisher(nats_url, prefix, 10.0) as pub:
        for message in messages:
            await pub.publish(message)


def stored_messages(pg_url: str, schema: str) -> int:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        try:
            row = conn.execute(f'SELECT count(*) FROM "{schema}".mem_messages').fetchone()
        except psycopg.errors.UndefinedTable:
            return 0
    return int(row[0]) if row else 0


def wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def processed_in_order(memory: Any, agent: str, per_agent: int) -> list[str]:
    """The agent's messages in the order its log recorded their decisions; each message once
    (a redelivered message processed again would show up a second time)."""
    order: list[str] = []
    for entry in memory.history(agent):
        if entry.message_id and entry.decision in ("ADD", "UPDATE", "NOOP") and (
            not order or order[-1] != entry.message_id
        ):
            order.append(entry.message_id)
    return order


def duplicate_facts(pg_url: str, schema: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        return conn.execute(
            f'SELECT agent_id, fact_text, count(*) FROM "{schema}".mem_facts '
            "GROUP BY agent_id, fact_text HAVING count(*) > 1"
        ).fetchall()


def start_nats_cluster(folder: Path, size: int = 3) -> tuple[list[subprocess.Popen[bytes]], list[int]]:
    """``size`` JetStream servers clustered over loopback routes (stores under ``folder``);
    returns the processes and their client ports, once a stream of ``size`` replicas can be made."""
    from engramdb.infra.embedded_nats import nats_server_binary

    client = [free_port() for _ in range(size)]
    routes = [free_port() for _ in range(size)]
    route_urls = ",".join(f"nats-route://127.0.0.1:{p}" for p in routes)
    procs = []
    for i in range(size):
        with open(folder / f"nats{i}.log", "wb") as out:
            procs.append(subprocess.Popen(
                [str(nats_server_binary()), "-a", "127.0.0.1", "-p", str(client[i]), "-n", f"n{i}",
                 "-js", "-sd", str(folder / f"js{i}"), "--cluster_name", "engramdb-test",
                 "--cluster", f"nats://127.0.0.1:{routes[i]}", "--routes", route_urls],
                stdout=out, stderr=subprocess.STDOUT,
            ))
    return procs, client


async def cluster_ready(urls: list[str], replicas: int) -> bool:
    """True once the cluster elected a JetStream meta leader and places an R``replicas`` stream."""
    import nats

    try:
        nc = await nats.connect(servers=urls, connect_timeout=2, max_reconnect_attempts=1)
    except Exception:  # noqa: BLE001 - not listening yet
        return False
    try:
        js = nc.jetstream(timeout=3)
        name = f"PROBE_{uuid.uuid4().hex[:8].upper()}"
        await js.add_stream(name=name, subjects=[name.lower()], num_replicas=replicas)
        await js.delete_stream(name)
        return True
    except Exception:  # noqa: BLE001 - no meta leader yet
        return False
    finally:
        await nc.close()
