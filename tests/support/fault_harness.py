"""Helpers for the lifecycle and fault tests: ``engramdb serve`` as a real subprocess, a
numbered workload published onto NATS, and the end checks read from PostgreSQL and NATS.

Why a separate module: the SIGTERM test and the fault scenarios share all of this, and each
scenario should read as "start, publish, break something, recover, check". Nothing here is a
fake: the process is the real ``engramdb serve``, the servers are real PostgreSQL and NATS.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import psycopg
from psycopg import sql

from engramdb.infra.embedded_base import pick_port
from engramdb.services.entrypoints.nats.publisher import MessagePublisher
from engramdb.services.write.messages import ConversationMessage, messages_stream_name

REPO = Path(__file__).resolve().parents[2]
CITIES = ("Lisbon", "Porto", "Recife", "Natal", "Belem", "Manaus", "Santos", "Olinda")
DURABLE = "engramdb-ingest"  # serve's consumers are DURABLE-p<partition> (default prefix)


class ProjectorLag(AssertionError):
    """The projector did not catch up with the event log (what a dead projector looks like)."""


class RetrieveFailed(AssertionError):
    """Retrieve did not answer after the recovery (e.g. a 500 from a stale pooled connection)."""


def wait_for(
    predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.1
) -> float:
    """Poll until true; returns the seconds it took, fails the test naming ``what``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if predicate():
            return time.monotonic() - start
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


# ----------------------------------------------------------------------------- the process


@dataclass
class Serve:
    """``engramdb serve --role all`` in a subprocess; its log is kept for failure messages."""

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @classmethod
    def start(cls, log_path: Path, **env: str) -> Serve:
        port = pick_port()
        full_env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("ENGRAMDB_")},
            "ENGRAMDB_HTTP_PORT": str(port),
            "ENGRAMDB_EMBEDDING_MODEL": "hash-bow-384",
            # a killed consumer's messages come back after 5 s instead of 30 (test speed)
            "ENGRAMDB_INGEST_ACK_WAIT_SEC": "5",
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        with open(log_path, "ab") as log_fh:
            proc = subprocess.Popen(
                [sys.executable, "-c", "from engramdb.services.entrypoints.cli.main import app; app()", "serve"],
                cwd=REPO,
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=log_fh,
                stderr=subprocess.STDOUT,
            )
        serve = cls(proc, port, log_path)
        serve.wait_http(120)
        return serve

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_http(self, timeout: float) -> None:
        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited {self.proc.returncode}:\n{self.log_tail()}")
            return self.get("/healthz")[0] == 200

        wait_for(up, timeout, "serve's /healthz")

    def get(self, path: str) -> tuple[int, Any]:
        return self._call(urllib.request.Request(self.base + path))

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        req = urllib.request.Request(
            self.base + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        return self._call(req)

    @staticmethod
    def _call(req: urllib.request.Request) -> tuple[int, Any]:
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except (urllib.error.URLError, OSError) as exc:
            return 0, str(exc)

    def terminate(self, timeout: float = 60.0) -> tuple[int, float]:
        """SIGTERM; returns (exit status, seconds to exit)."""
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(
                f"serve ignored SIGTERM for {timeout} s:\n{self.log_tail()}"
            ) from None
        return code, time.monotonic() - start

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


# ----------------------------------------------------------------------------- the workload


def workload(n: int, agents: int, tag: str) -> list[ConversationMessage]:
    """``n`` messages spread over ``agents`` agents; each one states a fact the offline
    extractor keeps ("I live in <city>"), with a stable message id (redelivery-safe)."""
    out = []
    for i in range(n):
        agent = f"{tag}-a{i % agents}"
        city = f"{CITIES[i % len(CITIES)]}{i}"
        out.append(
            ConversationMessage(
                agent_id=agent,
                message_id=f"m{i}",
                speaker="Ana",
                text=f"I live in {city} now.",
            )
        )
    return out


def publish(nats_url: str, messages: list[ConversationMessage]) -> None:
    async def go() -> None:
        async with MessagePublisher(nats_url) as pub:
            await pub.publish_many(messages)

    asyncio.run(go())


# ----------------------------------------------------------------------------- end checks


def _events_table(conn: psycopg.Connection[Any], schema: str) -> str | None:
    row = conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
        "AND table_name LIKE '%%\\_events' ORDER BY table_name LIMIT 1",
        (schema,),
    ).fetchone()
    return str(row[0]) if row else None


@dataclass
class Counts:
    recorded: int  # MessageRecord.Recorded events (one per message id)
    processed: int  # MessageRecord.Processed events (must be one per record)
    processed_records: int  # distinct records with a Processed event
    duplicate_facts: int  # facts repeating (agent, source message, text) in mem_facts
    fact_decisions: int  # ADD + UPDATE decisions (one per message with this workload)
    projected_processed: int  # mem_messages rows marked processed (the projector's view)


def counts(db_url: str, schema: str) -> Counts:
    with psycopg.connect(db_url, autocommit=True) as conn:
        table = _events_table(conn, schema)
        if table is None:
            return Counts(0, 0, 0, 0, 0, 0)
        events = sql.Identifier(schema, table)
        row = conn.execute(
            sql.SQL(
                "SELECT count(*) FILTER (WHERE topic LIKE '%%MessageRecord.Recorded'),"
                " count(*) FILTER (WHERE topic LIKE '%%MessageRecord.Processed'),"
                " count(DISTINCT originator_id) FILTER (WHERE topic LIKE '%%MessageRecord.Processed'),"
                " count(*) FILTER (WHERE topic ~ '(FactAdded|FactUpdated)$') FROM {}"
            ).format(events)
        ).fetchone()
        assert row is not None
        try:
            projected = conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE processed").format(
                    sql.Identifier(schema, "mem_messages")
                )
            ).fetchone()
            # event payloads are encrypted per agent (ADR-0018): look for repeats in the
            # facts read model, which keeps superseded facts too
            dup = conn.execute(
                sql.SQL(
                    "SELECT count(*) FROM (SELECT 1 FROM {} GROUP BY agent_id, "
                    "source_message_id, fact_text HAVING count(*) > 1) d"
                ).format(sql.Identifier(schema, "mem_facts"))
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            projected, dup = (0,), (0,)
    assert dup is not None and projected is not None
    return Counts(row[0], row[1], row[2], dup[0], row[3], projected[0])


def consumer_state(nats_url: str) -> tuple[int, int]:
    """(num_pending, num_ack_pending) summed over serve's durable ingest consumers (one per
    partition, ``engramdb-ingest-p<N>``: ADR-0020)."""

    async def go() -> tuple[int, int]:
        nc = await nats.connect(nats_url)
        try:
            infos = await nc.jetstream().consumers_info(messages_stream_name())
            ours = [i for i in infos if (i.name or "").startswith(f"{DURABLE}-p")]
            assert ours, "serve created no partition consumer"
            pending = sum(int(i.num_pending or 0) for i in ours)
            return pending, sum(int(i.num_ack_pending or 0) for i in ours)
        finally:
            await nc.close()

    return asyncio.run(go())


def nats_retrieve(
    nats_url: str, agent_id: str, query: str, timeout: float = 10.0
) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        nc = await nats.connect(nats_url)
        try:
            body = json.dumps({"agent_id": agent_id, "query": query}).encode()
            reply = await nc.request("engramdb.retrieve", body, timeout=timeout)
            return dict(json.loads(reply.data))
        finally:
            await nc.close()

    return asyncio.run(go())


def assert_all_processed_once(
    serve: Serve, db_url: str, schema: str, nats_url: str, n: int, timeout: float = 90.0
) -> Counts:
    """The end checks every scenario shares: every message recorded and processed exactly
    once, no duplicate fact, the projector caught up, the stream consumed, retrieve (HTTP and
    NATS) answering and /readyz green."""

    def explain(exc: AssertionError) -> str:
        return f"{exc}; {counts(db_url, schema)}\n{serve.log_tail()}"

    try:
        wait_for(lambda: counts(db_url, schema).processed_records >= n, timeout, f"{n} processed")
        wait_for(lambda: consumer_state(nats_url) == (0, 0), 60, "the ingest consumer drained")
    except AssertionError as exc:
        raise AssertionError(explain(exc)) from None
    try:
        wait_for(lambda: counts(db_url, schema).projected_processed >= n, 45, "projector")
    except AssertionError as exc:
        raise ProjectorLag(explain(exc)) from None
    final = counts(db_url, schema)
    assert final.recorded == n, final
    assert final.processed == n and final.processed_records == n, final  # exactly once
    assert final.duplicate_facts == 0 and final.fact_decisions == n, final
    agent, query = "fault-probe", "Where does Ana live?"
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(schema)))
        row = conn.execute("SELECT agent_id FROM mem_messages LIMIT 1").fetchone()
        assert row is not None
        agent = str(row[0])
    status, body = serve.post("/v1/retrieve", {"agent_id": agent, "query": query})
    if not (status == 200 and body["facts"]):
        raise RetrieveFailed(f"HTTP retrieve: {status} {body}\n{serve.log_tail()}")
    reply = nats_retrieve(nats_url, agent, query)
    if not reply.get("result", {}).get("facts"):
        raise RetrieveFailed(f"NATS retrieve: {reply}\n{serve.log_tail()}")
    try:
        wait_for(lambda: serve.get("/readyz")[0] == 200, 30, "/readyz green")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {serve.get('/readyz')}\n{serve.log_tail()}") from None
    return final
