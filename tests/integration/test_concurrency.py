"""Retrieve under concurrency, on the real servers: many HTTP requests at once all answer
(no request waits on a pool it holds, ADR-0010), and NATS retrieve has several requests in
flight per process."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from engramdb.infra.embedded_postgres import ensure_postgres
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.entrypoints.nats.retrieve import create_retrieve_broker, request_retrieve
from engramdb.services.memory.facade import Memory
from engramdb.services.retrieve.models import RetrieveRequest
from engramdb.services.retrieve.pipeline import Retriever

TEXTS = [
    "I live in Lisbon and I work at Acme.",
    "My sister Carla works at Vertix.",
    "I love jazz and I play the piano.",
    "Carla lives in Porto.",
    "My dog is called Bolt.",
    "I moved to Recife last year.",
]
QUERIES = ["Where does Ana live?", "Who is Carla?", "What music does Ana like?", "dog name"]


@pytest.fixture
def memory(fresh_schema, agent_id: str) -> Iterator[Memory]:
    _schema, env = fresh_schema("conc")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        last = 0
        for text in TEXTS:
            last = mem.write(agent_id, text, speaker="Ana").position or last
        mem.wait_for_projections(last)
        yield mem


async def test_fifty_concurrent_http_retrieves_all_answer(memory: Memory, agent_id: str) -> None:
    app = create_app(memory)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t", timeout=60) as client:

        async def one(i: int) -> int:
            body = {"agent_id": agent_id, "query": QUERIES[i % len(QUERIES)]}
            return (await client.post("/v1/retrieve", json=body)).status_code

        started = time.monotonic()
        codes = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(50))), timeout=45)
        elapsed = time.monotonic() - started
    assert codes == [200] * 50
    assert elapsed < 20, f"50 concurrent retrieves took {elapsed:.1f} s"


def test_workers_change_timing_not_results(memory: Memory, agent_id: str) -> None:
    """The side stages on worker connections give the same answer as all on one connection."""
    inline = Retriever(memory.pool, memory.embedder)
    try:
        for query in QUERIES:
            alone, beside = inline.retrieve(agent_id, query), memory.retrieve(agent_id, query)
            assert beside.context == alone.context and beside.context
            assert [f.model_dump() for f in beside.facts] == [f.model_dump() for f in alone.facts]
            assert [e.model_dump() for e in beside.events] == [e.model_dump() for e in alone.events]
    finally:
        inline.close()


class _InFlight:
    """The real memory, counting retrieves in flight at once. Each call waits (at most 1 s)
    for a second one to be in flight, so overlap is observed deterministically when the
    responder allows it; the first wait that times out releases every later call."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory
        self.lock = threading.Lock()
        self.now = self.most = 0
        self.overlap = threading.Event()

    def retrieve(self, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            if self.now > 1:
                self.overlap.set()
        try:
            if not self.overlap.wait(1.0):
                self.overlap.set()
            return self.memory.retrieve(*args, **kwargs)
        finally:
            with self.lock:
                self.now -= 1


async def test_nats_retrieve_answers_requests_concurrently(
    memory: Memory, agent_id: str, nats_url: str
) -> None:
    counted = _InFlight(memory)
    subject = f"engramdb.retrieve.conc{uuid.uuid4().hex[:8]}"
    server = create_retrieve_broker(counted, nats_url, subject=subject)
    await server.start()
    try:
        requests = [
            RetrieveRequest(agent_id=agent_id, query=QUERIES[i % len(QUERIES)]) for i in range(12)
        ]
        replies = await asyncio.gather(
            *(request_retrieve(server, r, subject=subject) for r in requests)
        )
    finally:
        await server.stop()
    assert all(r.error is None and r.result is not None and r.result.context for r in replies)
    assert counted.most > 1, "NATS retrieve answered one request at a time"


def test_pooled_connections_survive_a_postgresql_restart(agent_id: str) -> None:
    """A PostgreSQL of our own, restarted under a live ``Memory``: the stale pooled
    connections (read pool, worker pool, event store) are replaced, nothing fails, and
    quickly (a failed check sweeps the pool instead of retrying one stale connection at a
    time after 1, 2, 4 … s)."""
    data_dir = Path(tempfile.mkdtemp(prefix="engramdb-restart-", dir="/tmp"))
    handle = ensure_postgres(data_dir, fast_unsafe=True)
    try:
        mem = Memory.open(database_url=handle.url, embedder=HashEmbedder(384), llm=None, quiet=True)
        try:
            written = mem.write(agent_id, "I live in Lisbon.", speaker="Ana")
            mem.wait_for_projections(written.position)
            mem.projections.stop()  # projector restarts are not what this test is about
            with ThreadPoolExecutor(16) as threads:  # both pools full of open connections now
                plans = list(
                    threads.map(lambda i: mem.retrieve(agent_id, QUERIES[i % 4]).plan, range(64))
                )
            assert all(plans) and mem.pool.get_stats()["pool_size"] > 4
            port = handle.port
            handle.stop()
            handle = ensure_postgres(data_dir, fast_unsafe=True)
            assert handle.port == port, "the restarted server must listen where the pools point"
            client = TestClient(create_app(mem))
            started = time.monotonic()
            response = client.post(
                "/v1/retrieve", json={"agent_id": agent_id, "query": "Where does Ana live?"}
            )
            assert response.status_code == 200, response.text
            assert "Lisbon" in response.json()["context"]
            again = mem.write(agent_id, "I love jazz.", speaker="Ana")  # the event store's pool
            assert again.position is not None and again.position > (written.position or 0)
            assert time.monotonic() - started < 10
        finally:
            mem.close()
    finally:
        handle.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


async def test_busy_pool_is_a_503_not_a_500(memory: Memory, agent_id: str) -> None:
    """Overload beyond the pool's timeout is answered 503 + Retry-After (the client may retry)."""
    memory.pool.timeout = 0.5  # how long a request waits for a connection
    held = [memory.pool.getconn() for _ in range(memory.pool.max_size)]
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(memory)), base_url="http://t"
        ) as c:
            response = await c.post(
                "/v1/retrieve", json={"agent_id": agent_id, "query": "Where does Ana live?"}
            )
    finally:
        for conn in held:
            memory.pool.putconn(conn)
    assert response.status_code == 503 and response.headers["retry-after"] == "1"
    assert "busy" in response.json()["detail"]
