"""HTTP (FastAPI over httpx's ASGI transport) and NATS request/reply (real NATS server)
round-trips of the retrieve surfaces, backed by the real ``Retriever`` on the real DB.

``ReadModelMemory`` is the smallest object with the facade's methods: ``retrieve`` is the
real pipeline; ``facts_as_of``/``history`` read ``mem_facts``; ``write`` records the turn
in ``mem_messages``. Every method hits PostgreSQL — nothing here fakes the database.
"""

# ruff: noqa: F811  (pytest fixtures imported from test_retrieve_support)
from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_retrieve_support import EMBEDDER, T0, Store, load_worked_examples, store  # noqa: F401

from engramdb.services.entrypoints.http.api import create_app, export_openapi
from engramdb.services.entrypoints.nats.retrieve import create_retrieve_broker, request_retrieve
from engramdb.services.management.metadata_filter import MetadataFilter
from engramdb.services.management.models import FactFilter
from engramdb.services.management.queries import list_facts
from engramdb.services.retrieve import Retriever, RetrieveRequest
from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.signals import fact_visibility


class ReadModelMemory:
    def __init__(self, store: Store) -> None:
        self.store = store
        # the spec's formula: these round trips assert the graph-found worked examples
        self.retriever = Retriever(store.pool, EMBEDDER, config=RetrieveConfig(ranking="formula"))

    def retrieve(self, agent_id: str, query: str, **kw: Any) -> Any:
        return self.retriever.retrieve(agent_id, query, **kw)

    def facts_as_of(self, agent_id: str, as_of: datetime) -> list[dict[str, Any]]:
        with self.store.pool.connection() as conn:
            rows = conn.execute(
                f"SELECT fact_id, fact_text FROM mem_facts f WHERE agent_id = %(a)s AND {fact_visibility(as_of)}"
                " ORDER BY fact_id", {"a": agent_id, "t": as_of}).fetchall()
        return [{"fact_id": r[0], "text": r[1]} for r in rows]

    def list_facts(self, agent_id: str, metadata: dict[str, Any] | None = None, **filters: Any) -> Any:
        tree = None if metadata is None else MetadataFilter(metadata)  # as Memory.list_facts
        return list_facts(self.store.pool, agent_id, FactFilter(**filters), tree)

    def history(self, agent_id: str, fact_id: str | None = None) -> list[dict[str, Any]]:
        with self.store.pool.connection() as conn:
            rows = conn.execute("SELECT fact_id, status, recorded_at FROM mem_facts WHERE agent_id = %s AND fact_id = %s",
                                (agent_id, fact_id)).fetchall()
        return [{"fact_id": r[0], "decision": "ADD", "status": r[1], "recorded_at": r[2]} for r in rows]

    def write(self, agent_id: str, text: str, *, message_id: str | None = None, occurred_at: datetime | None = None,
              speaker: str | None = None, **_: Any) -> dict[str, Any]:
        mid = message_id or uuid.uuid4().hex
        self.store.message(agent_id, mid, text, occurred_at or datetime.now(UTC), speaker)
        return {"agent_id": agent_id, "message_id": mid, "position": 0, "duplicate": False}

    def health(self) -> dict[str, Any]:
        with self.store.pool.connection() as conn:
            conn.execute("SELECT 1")
        return {"ok": True, "database": "up"}


@pytest.fixture
def memory(store: Store) -> Iterator[ReadModelMemory]:
    m = ReadModelMemory(store)
    yield m
    m.retriever.close()


async def test_http_round_trip(memory: ReadModelMemory, agent_id: str) -> None:
    load_worked_examples(memory.store, agent_id)
    app = create_app(memory)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        r = await client.post("/v1/retrieve", json={"agent_id": agent_id, "query": "What happened with Vertix?"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert "f_ricardo_cofounder" in [f["fact_id"] for f in body["facts"]]
        assert body["context"].startswith("Known facts:\n- ") and body["plan"]["strategy"] == "multi_signal"

        r = await client.post("/v1/retrieve", json={"agent_id": agent_id, "query": "Where does Marcos Tavares live?",
                                                    "as_of": (T0 - timedelta(days=4)).isoformat()})
        assert r.status_code == 200 and "f_marcos_home" not in [f["fact_id"] for f in r.json()["facts"]]

        # invalid params => 422 naming the field
        r = await client.post("/v1/retrieve", json={"agent_id": agent_id})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "query"]
        r = await client.post("/v1/retrieve", json={"agent_id": agent_id, "query": "x", "config_overrides": {"topk_fact": 1}})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "config_overrides", "topk_fact"]
        r = await client.post("/v1/retrieve", json={"agent_id": agent_id, "query": "x", "config_overrides": {"min_score": 3}})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "config_overrides", "min_score"]
        r = await client.post("/v1/retrieve", json={"agent_id": agent_id, "query": "x", "wait_for": -1})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "wait_for"]

        r = await client.post("/v1/messages", json={"agent_id": agent_id, "text": "Vertix opened an office in Lisbon",
                                                    "message_id": "m-http", "occurred_at": T0.isoformat()})
        assert r.status_code == 200 and r.json()["message_id"] == "m-http"
        r = await client.post("/v1/retrieve", json={"agent_id": agent_id, "query": "Lisbon office"})
        assert [e["message_id"] for e in r.json()["events"]] == ["m-http"]
        r = await client.post("/v1/messages", json={"agent_id": agent_id, "text": "bad\u0000text"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"][:2] == ["body", "text"]

        r = await client.get(f"/v1/agents/{agent_id}/facts", params={"as_of": (T0 - timedelta(days=9)).isoformat()})
        assert r.status_code == 200
        assert {f["fact_id"] for f in r.json()["items"]} == {"f_marcos_job", "f_marcos_wife", "f_carol_job", "f_ricardo_cofounder", "f_bruno_job"}
        r = await client.get(f"/v1/agents/{agent_id}/facts", params={"as_of": "not-a-date"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "as_of"]
        r = await client.get(f"/v1/agents/{agent_id}/facts/f_marcos_home/history")
        assert r.status_code == 200 and r.json()[0]["fact_id"] == "f_marcos_home"
        r = await client.get(f"/v1/agents/{agent_id}/facts/nope/history")
        assert r.status_code == 404

        assert (await client.get("/healthz")).json() == {"status": "ok", "checks": {}}
        ready = await client.get("/readyz")
        assert ready.status_code == 200 and ready.json()["checks"]["database"] == "up"


def test_openapi_export(tmp_path: Path) -> None:
    path = export_openapi(tmp_path / "openapi.json")
    spec = json.loads(path.read_text())
    assert {"/v1/retrieve", "/v1/messages", "/v1/agents/{agent_id}/facts",
            "/v1/agents/{agent_id}/facts/{fact_id}/history", "/healthz", "/readyz"} <= set(spec["paths"])
    assert "RetrieveRequest" in spec["components"]["schemas"]


async def test_nats_request_reply(memory: ReadModelMemory, agent_id: str, nats_url: str) -> None:
    load_worked_examples(memory.store, agent_id)
    subject = f"engramdb.retrieve.test{uuid.uuid4().hex[:8]}"
    server = create_retrieve_broker(memory, nats_url, subject=subject)
    await server.start()
    try:
        reply = await request_retrieve(server, RetrieveRequest(agent_id=agent_id, query="Where does Marcos Tavares live?"),
                                       subject=subject)
        assert reply.error is None and reply.result is not None
        assert reply.result.facts[0].fact_id == "f_marcos_home"
        assert reply.result.context.startswith("Known facts:\n- Marcos Tavares lives in Porto Alegre")

        bad = await request_retrieve(server, {"agent_id": agent_id}, subject=subject)
        assert bad.result is None and bad.error_type == "validation" and "query" in (bad.error or "")
        bad = await request_retrieve(server, {"agent_id": agent_id, "query": "x", "config_overrides": {"nope": 1}},
                                     subject=subject)
        assert bad.error_type == "validation" and "'nope'" in (bad.error or "")
        raw = await server.request("{not json", subject, timeout=5)
        assert "invalid JSON" in json.loads(raw.body)["error"]
        greeting = await request_retrieve(server, {"agent_id": agent_id, "query": "bom dia"}, subject=subject)
        assert greeting.result is not None and greeting.result.plan.strategy == "skip"
    finally:
        await server.stop()
