"""``/metrics`` against the real servers: after a write, a retrieve, a dead letter and a failed
LLM call, each series exists with the value those events imply (scraped over HTTP, parsed
with prometheus-client's own parser)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engramdb.infra.embedded_base import wait_until
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.entrypoints.nats.ingest import IngestThread, build_ingest_app
from engramdb.services.entrypoints.nats.publisher import MessagePublisher
from engramdb.services.memory.facade import Memory


class UnreachableLLM:
    """An LLM provider whose endpoint is down: every call raises, as a network error would."""

    name = "unreachable"

    def __init__(self) -> None:
        self.calls = 0

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        temperature: float = 0,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> str:
        self.calls += 1
        raise ConnectionError("LLM endpoint unreachable")


@pytest.fixture
def memory(fresh_schema) -> Iterator[tuple[Memory, UnreachableLLM]]:
    _schema, env = fresh_schema("metrics")
    llm = UnreachableLLM()
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=llm, quiet=True) as mem:
        yield mem, llm


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def _scrape(memory: Memory) -> httpx.Response:
    transport = httpx.ASGITransport(app=create_app(memory))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.get("/metrics")


async def test_metrics_after_write_retrieve_dead_letter_and_llm_error(
    memory: tuple[Memory, UnreachableLLM], nats_url: str, agent_id: str
) -> None:
    mem, llm = memory
    try:  # the LLM is down: however the write copes, the failed call is counted
        written = await asyncio.to_thread(mem.write, agent_id, "I work at Vertix.", speaker="Ana")
        position = written.position
    except Exception:  # noqa: BLE001
        position = None
    assert llm.calls >= 1
    await asyncio.to_thread(mem.wait_for_projections, position)
    await asyncio.to_thread(mem.retrieve, agent_id, "Where does Ana work?")
    await asyncio.to_thread(mem.retrieve, agent_id, "Vertix")

    prefix = f"t{uuid.uuid4().hex[:10]}"
    app, _broker = build_ingest_app(nats_url, mem.pipeline, prefix=prefix, metrics=mem.metrics)
    stats: dict[str, int] = app.ingest_service.stats  # type: ignore[attr-defined]
    ingest = IngestThread(app).start()
    try:
        async with MessagePublisher(nats_url, prefix) as publisher:
            await publisher.publish_raw(agent_id, b"{not json")
        done: Callable[[], bool] = lambda: stats["dead_lettered"] == 1  # noqa: E731
        assert await asyncio.to_thread(wait_until, done, 20), stats
    finally:
        ingest.stop()

    response = await _scrape(mem)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    got = _samples(response.text)
    assert got[("engramdb_retrieve_seconds_count", ())] == 2
    assert got[("engramdb_retrieve_seconds_bucket", (("le", "+Inf"),))] == 2
    assert got[("engramdb_dead_letters_total", ())] == 1
    assert got[("engramdb_ingest_messages_total", (("outcome", "dead_lettered"),))] == 1
    assert got[("engramdb_ingest_pending_messages", ())] == 0
    assert got[("engramdb_llm_errors_total", ())] == llm.calls
    head = got[("engramdb_event_log_head", ())]
    assert head >= 1
    for name in ("conversation", "memory"):
        labels = (("projection", name),)
        assert got[("engramdb_projection_lag_events", labels)] == 0
        assert got[("engramdb_projection_position", labels)] == head
        assert got[("engramdb_projector_up", labels)] == 1
        assert got[("engramdb_projector_restarts_total", labels)] == 0


async def test_metrics_registries_are_per_memory(
    memory: tuple[Memory, UnreachableLLM], fresh_schema
) -> None:
    """Two ``Memory`` objects in one process: separate registries, no duplicate-name error."""
    mem, _llm = memory
    _schema, env = fresh_schema("metrics2")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as other:
        await asyncio.to_thread(other.retrieve, "agent-x", "anything")
        assert _samples(other.metrics.exposition().decode())[("engramdb_retrieve_seconds_count", ())] == 1
    assert _samples(mem.metrics.exposition().decode())[("engramdb_retrieve_seconds_count", ())] == 0


async def test_metrics_is_404_without_a_registry() -> None:
    class Bare:
        pass

    assert (await _scrape(Bare())).status_code == 404  # type: ignore[arg-type]
