"""The OpenAPI page a newcomer clicks through (issue 27, ADR-0050): every request example is
sent as Swagger's "Try it out" would send it and succeeds; every operation has a tag and a
typed 200 response; the document's version is the package's; ``GET /v1/agents/{A}/history``
pages through an agent's decisions. On a real Memory over the test PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import version
from typing import Any

import httpx
import pytest

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.memory.facade import Memory


@pytest.fixture
def memory(fresh_schema) -> Iterator[Memory]:
    _schema, env = fresh_schema("oapi")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield mem


async def _send_examples(app: Any, spec: dict[str, Any]) -> list[tuple[str, str, int]]:
    sent = []
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        # writes first, as a user would; then a webhook, then Mem0's add before its search
        for path in ("/v1/messages", "/v1/facts", "/v1/retrieve", "/v1/webhooks",
                     "/v3/memories/add/", "/v3/memories/search/"):
            body = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]
            assert body.get("examples"), f"{path} has no examples"
            for name, example in body["examples"].items():
                response = await client.post(path, json=example["value"])
                sent.append((path, name, response.status_code))
                assert response.status_code == 200, (path, name, response.text)
                if path == "/v3/memories/search/":
                    assert "results" in response.json(), response.text
        history = await client.get("/v1/agents/agent-1/history")
        assert history.status_code == 200
        entries = history.json()
        assert entries and all(e["version"] > 0 for e in entries)
        last = entries[0]["version"]
        page = await client.get(f"/v1/agents/agent-1/history?after_version={last}&limit=1")
        assert [e["version"] for e in page.json()] == [entries[1]["version"]]
        bad = await client.get("/v1/agents/agent-1/history?limit=0")
        assert bad.status_code == 422
    return sent


async def test_every_example_succeeds_and_the_document_is_typed(memory: Memory) -> None:
    app = create_app(memory)
    spec = app.openapi()
    assert spec["info"]["version"] == version("engramdb")
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            assert op.get("tags"), f"{method.upper()} {path} is untagged ('default')"
            if path.startswith("/v1/"):
                ok = op["responses"]["200"]["content"]["application/json"]["schema"]
                assert ok, f"{method.upper()} {path}: untyped 200"
    write_ok = spec["paths"]["/v1/messages"]["post"]["responses"]["200"]["content"]["application/json"]
    assert write_ok["schema"]["$ref"] == "#/components/schemas/WriteResult"
    sent = await _send_examples(app, spec)
    assert len(sent) == 12
