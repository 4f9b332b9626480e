"""Bad HTTP input is a 4xx, never a 500 (issue 10, item 4), on the real ``Memory`` facade
(real PostgreSQL and projectors; offline rule-based extractor, hashing embedder)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import httpx
import pytest

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.memory.facade import Memory
from engramdb.services.write.messages import InvalidMessage, parse_message

POISON_TIMES = ["9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00", "1899-12-31T23:59:59Z", "2200-01-01T00:00:00Z"]


@pytest.fixture(scope="module")
def memory(pg_url: str) -> Iterator[Memory]:
    import uuid

    import psycopg
    from psycopg import sql

    from engramdb.infra.database import es_env_from_url

    schema = f"badin_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    with Memory.open(env=es_env_from_url(pg_url, schema), embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield mem
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture
async def client(memory: Memory) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(memory, max_body_bytes=64 * 1024 + 16 * 1024 + 8192)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        yield c


@pytest.mark.parametrize("when", POISON_TIMES)
def test_out_of_range_occurred_at_is_refused(when: str) -> None:
    with pytest.raises(InvalidMessage, match=r"occurred_at .*out of range.*1900-01-01"):
        parse_message({"agent_id": "a", "text": "hi", "occurred_at": when})
    assert parse_message({"agent_id": "a", "text": "hi", "occurred_at": "2199-12-31T23:59:59"}).occurred_at.tzinfo is UTC


async def test_out_of_range_times_are_422_and_the_agent_stays_readable(
    client: httpx.AsyncClient, agent_id: str
) -> None:
    ok = await client.post("/v1/messages", json={"agent_id": agent_id, "text": "I live in Recife.", "speaker": "Ana"})
    assert ok.status_code == 200, ok.text
    for when in POISON_TIMES:
        r = await client.post("/v1/messages", json={"agent_id": agent_id, "text": "I live in Porto.", "occurred_at": when})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "occurred_at"], r.text
        r = await client.post("/v1/retrieve", json={"agent_id": agent_id, "query": "where", "as_of": when})
        assert r.status_code == 422 and "as_of" in r.json()["detail"][0]["loc"], r.text
    # datetime's own limits (OverflowError before): 422 too
    for when in ["9999-12-31T23:59:59.999999", "0001-01-01T00:00:00"]:
        r = await client.post("/v1/retrieve", json={"agent_id": agent_id, "query": "where", "as_of": when})
        assert r.status_code == 422, r.text
    r = await client.post("/v1/retrieve", json={"agent_id": agent_id, "query": "where does Ana live? Recife",
                                               "wait_for": ok.json()["position"]})
    assert r.status_code == 200 and "Recife" in r.text, r.text


async def test_unencodable_json_values_are_422_not_500(client: httpx.AsyncClient, agent_id: str) -> None:
    a = json.dumps(agent_id)
    bodies = [
        '{"agent_id": A, "query": "\\ud800"}',  # lone surrogate
        '{"agent_id": A, "text": "\\udfff hi"}',
        '{"agent_id": A, "query": "q", "wait_for": NaN}',
        '{"agent_id": A, "query": "q", "config_overrides": {"min_score": NaN}}',
        '{"agent_id": A, "query": "q", "config_overrides": {"recency_half_life_days": Infinity}}',
        '{"agent_id": A, "query": "q", "config_overrides": {"\\ud800": 1}}',
        '{"agent_id": "\\ud800", "query": NaN}',
    ]
    bodies = [b.replace("A", a, 1) if b.startswith('{"agent_id": A') else b for b in bodies]
    for body in bodies:
        path = "/v1/messages" if '"text"' in body else "/v1/retrieve"
        r = await client.post(path, content=body, headers={"content-type": "application/json"})
        assert r.status_code == 422, (body, r.status_code, r.text)
        assert r.json()["detail"], body


@pytest.mark.parametrize(("overrides", "status"), [
    ({"candidate_pool": 1001}, 422), ({"candidate_pool": 1000}, 200), ({"hnsw_ef_search": 5000}, 422),
    ({"recency_half_life_days": 1e300}, 422), ({"graph_hop_decay": [2.0]}, 422), ({"graph_hop_decay": [1.0] * 100}, 422),
])
async def test_numeric_overrides_are_bounded(client: httpx.AsyncClient, agent_id: str, overrides: dict, status: int) -> None:
    r = await client.post("/v1/retrieve", json={"agent_id": agent_id, "query": "where", "config_overrides": overrides})
    assert r.status_code == status, r.text
    if status == 422:
        assert r.json()["detail"][0]["loc"][:3] == ["body", "config_overrides", next(iter(overrides))], r.text


async def test_wait_for_beyond_the_log_is_422_at_once(client: httpx.AsyncClient, agent_id: str) -> None:
    started = datetime.now(UTC)
    r = await client.post("/v1/retrieve", json={"agent_id": agent_id, "query": "q", "wait_for": 2**62})
    assert r.status_code == 422 and "beyond the end of the log" in r.text, r.text
    assert (datetime.now(UTC) - started).total_seconds() < 5


async def test_request_bodies_are_capped_with_413(client: httpx.AsyncClient, agent_id: str) -> None:
    big = json.dumps({"agent_id": agent_id, "query": "x" * 200_000})
    r = await client.post("/v1/retrieve", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "ENGRAMDB_HTTP_MAX_BODY_BYTES" in r.text, r.text

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted while reading
        for _ in range(40):
            yield b" " * 4096
        yield b"{}"

    r = await client.post("/v1/messages", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413, r.text
    small = await client.post("/v1/retrieve", json={"agent_id": agent_id, "query": "fine"})
    assert small.status_code == 200, small.text


async def test_reused_message_id_with_other_text_is_409(
    client: httpx.AsyncClient, memory: Memory, agent_id: str
) -> None:
    first = {"agent_id": agent_id, "message_id": "m-1", "text": "I live in Recife.", "speaker": "Ana"}
    written = await client.post("/v1/messages", json=first)
    assert written.status_code == 200
    again = await client.post("/v1/messages", json=first)
    assert again.status_code == 200 and again.json()["duplicate"] is True
    other = await client.post("/v1/messages", json={**first, "text": "I live in Porto."})
    assert other.status_code == 409, other.text
    assert other.json()["detail"][0]["loc"] == ["body", "message_id"] and "conflict" in other.text
    memory.wait_for_projections(written.json()["position"])  # read your write before checking it
    r = await client.get(f"/v1/agents/{agent_id}/facts")
    assert "Recife" in r.text and "Porto" not in r.text  # the original stays


def test_an_agent_poisoned_before_the_window_stays_readable(fresh_schema, agent_id: str) -> None:  # type: ignore[no-untyped-def]
    """A year-10000 message stored by an older release (bypassing today's edge check):
    retrieve reads it as the window's edge instead of failing on every call."""
    from datetime import timedelta, timezone

    from engramdb.domain.time_range import LATEST
    from engramdb.services.write.messages import ConversationMessage

    _schema, env = fresh_schema("poisoned")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as memory:
        when = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-14)))
        old = ConversationMessage.model_construct(agent_id=agent_id, message_id="old-1", text="I live in Recife.",
                                                  speaker="Ana", session_id=None, occurred_at=when, metadata={})
        written = memory.pipeline.write(old)
        result = memory.retrieve(agent_id, "Where does Ana live? Recife", wait_for=written.position)
        assert [e.occurred_at for e in result.events] in ([], [LATEST]) and "Recife" in result.context


def test_wait_for_zero_on_an_empty_log_returns_at_once(fresh_schema, agent_id: str) -> None:  # type: ignore[no-untyped-def]
    import time

    _schema, env = fresh_schema("emptylog")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as memory:
        started = time.monotonic()
        assert memory.retrieve(agent_id, "anything", wait_for=0).facts == []
        memory.wait_for_projections()
        assert time.monotonic() - started < 5
        with pytest.raises(ValueError, match="beyond the end of the log"):
            memory.retrieve(agent_id, "anything", wait_for=1)
