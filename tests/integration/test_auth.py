"""HTTP authentication and authorisation (ADR-0011): every endpoint with no, wrong, out-of-scope
(agent) and out-of-scope (read/write) keys, and with the right one, on a real ``Memory`` (real
PostgreSQL); the open endpoints; the trusted-host check; the non-loopback refusal; key files
and ``engramdb keys create``."""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from typer.testing import CliRunner

from engramdb.infra.api_keys import ApiKeyConfigError, KeyRing, hash_key, load_keyring
from engramdb.infra.database import es_env_from_url
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.infra.settings import Settings
from engramdb.services.entrypoints.cli.main import app as cli_app
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.entrypoints.http.auth import allowed_hosts, check_bind, secure
from engramdb.services.entrypoints.serve.server import run_server
from engramdb.services.memory.facade import Memory

READER, WRITER, ADMIN, OTHER = "edb_reader-key", "edb_writer-key", "edb_admin-key", "edb_b-key"
RING = KeyRing.parse(
    [
        {"key": READER, "agents": ["team-a:*"], "scopes": ["read"]},
        {"key": WRITER, "agents": ["team-a:*"], "scopes": ["write"]},
        {"key": ADMIN, "agents": ["*"], "scopes": ["admin"]},
        {"key": OTHER, "agents": ["team-b:*"], "scopes": ["read", "write"]},
    ],
    "test",
)
AGENT = f"team-a:{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def memory(pg_url: str) -> Iterator[Memory]:
    schema = f"auth_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        env = es_env_from_url(pg_url, schema)
        with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
            yield mem
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def _client(app: Any, host: str = "localhost") -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://{host}")


# (method, path, body, scope it needs, status with the right key); every per-agent endpoint
ENDPOINTS = [
    ("POST", "/v1/retrieve", {"agent_id": AGENT, "query": "where does Ana live?"}, "read", 200),
    ("POST", "/v1/messages", {"agent_id": AGENT, "text": "I live in Recife."}, "write", 200),
    ("POST", "/v1/facts", {"agent_id": AGENT, "facts": [{"subject": "Ana", "text": "Ana likes tea"}]},
     "write", 200),  # ADR-0049
    ("GET", f"/v1/agents/{AGENT}/facts", None, "read", 200),
    ("GET", f"/v1/agents/{AGENT}/facts/f-unknown", None, "read", 404),
    ("DELETE", f"/v1/agents/{AGENT}/facts/f-unknown", None, "write", 404),
    ("GET", f"/v1/agents/{AGENT}/facts/f-unknown/history", None, "read", 404),
    ("GET", f"/v1/agents/{AGENT}/history", None, "read", 200),
    ("GET", f"/v1/agents/{AGENT}/entities", None, "read", 200),
    ("GET", f"/v1/agents/{AGENT}/messages", None, "read", 200),
]
# admin-only: spans agents, or destroys a whole agent's memory
ADMIN_ENDPOINTS = [
    ("GET", "/v1/agents", None),
    ("POST", f"/v1/agents/{AGENT}/reprocess", None),
    ("POST", f"/v1/agents/{AGENT}/forget", {"actor": "test"}),
    ("POST", f"/v1/agents/{AGENT}/erase", {"actor": "test"}),
    ("POST", "/v1/webhooks", {"url": "https://example.com/hook", "agent_prefix": ""}),  # ADR-0049
    ("GET", "/v1/webhooks", None),
    ("DELETE", "/v1/webhooks/wh_unknown", None),
]
ADMIN_STATUS = {"/v1/webhooks/wh_unknown": 404}  # the admin got through: no such webhook


# the Mem0 platform routes (issue 24, ADR-0047): Mem0's "Token" scheme, memories user:<id>...
MEM0_ID = "f_unknown." + base64.urlsafe_b64encode(b"user:zed").decode().rstrip("=")
MEM0_ENDPOINTS = [
    ("GET", "/v1/ping/", None, 200),
    ("POST", "/v3/memories/add/", {"messages": "I live in Recife.", "user_id": "zed"}, 200),
    ("POST", "/v3/memories/", {"filters": {"user_id": "zed"}}, 200),
    ("POST", "/v3/memories/search/", {"query": "Recife", "filters": {"user_id": "zed"}}, 200),
    ("GET", f"/v1/memories/{MEM0_ID}/", None, 404),
    ("PUT", f"/v1/memories/{MEM0_ID}/", {"text": "x"}, 404),
    ("DELETE", f"/v1/memories/{MEM0_ID}/", None, 404),
    ("GET", f"/v1/memories/{MEM0_ID}/history/", None, 404),
    ("DELETE", "/v1/memories/?user_id=zed", None, 200),
]


def test_every_data_endpoint_is_covered() -> None:
    paths = create_app(None).openapi()["paths"]
    routes = {(m.upper(), p) for p, ops in paths.items() if p.startswith("/v1/") for m in ops}
    listed = [(m, p) for m, p, *_ in ENDPOINTS] + [(m, p) for m, p, _b in ADMIN_ENDPOINTS]
    listed += [(m, p.split("?")[0]) for m, p, *_ in MEM0_ENDPOINTS if p.startswith("/v1/")]
    routes |= {(m.upper(), p) for p, ops in paths.items() if p.startswith("/v3/") for m in ops}
    listed += [(m, p) for m, p, *_ in MEM0_ENDPOINTS if p.startswith("/v3/")]
    covered = {(m, p.replace(AGENT, "{agent_id}").replace("f-unknown", "{fact_id}")
                .replace(MEM0_ID, "{memory_id}").replace("wh_unknown", "{webhook_id}")) for m, p in listed}
    assert routes == covered


@pytest.mark.parametrize(("method", "path", "body", "status"), MEM0_ENDPOINTS,
                         ids=[f"{e[0]} {e[1]}" for e in MEM0_ENDPOINTS])
async def test_mem0_endpoint_credentials(
    memory: Memory, method: str, path: str, body: Any, status: int
) -> None:
    app = secure(create_app(memory), RING)
    async with _client(app) as client:
        missing = await client.request(method, path, json=body)
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Token"
        junk = await client.request(method, path, json=body, headers={"Authorization": "Token edb_nope"})
        assert junk.status_code == 401
        if path != "/v1/ping/":  # a key for team-a:* does not reach the memory user:zed
            other = await client.request(method, path, json=body, headers={"Authorization": f"Token {READER}"})
            assert other.status_code == 403, other.text
        ok = await client.request(method, path, json=body, headers={"Authorization": f"Token {ADMIN}"})
        assert ok.status_code == status, ok.text


async def _call(client: httpx.AsyncClient, method: str, path: str, body: Any, key: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return await client.request(method, path, json=body, headers=headers)


@pytest.mark.parametrize(("method", "path", "body", "scope", "status"), ENDPOINTS,
                         ids=[f"{e[0]} {e[1]}" for e in ENDPOINTS])
async def test_endpoint_credentials(
    memory: Memory, method: str, path: str, body: Any, scope: str, status: int
) -> None:
    app = secure(create_app(memory), RING)
    right, wrong_scope = (READER, WRITER) if scope == "read" else (WRITER, READER)
    async with _client(app) as client:
        missing = await _call(client, method, path, body, None)
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert (await _call(client, method, path, body, "edb_not-a-key")).status_code == 401
        assert (await _call(client, method, path, body, OTHER)).status_code == 403  # other agents
        denied = await _call(client, method, path, body, wrong_scope)
        assert denied.status_code == 403 and scope in denied.json()["detail"]
        ok = await _call(client, method, path, body, right)
        assert ok.status_code == status, ok.text
        assert (await _call(client, method, path, body, ADMIN)).status_code == ok.status_code


@pytest.mark.parametrize(("method", "path", "body"), ADMIN_ENDPOINTS, ids=[e[1] for e in ADMIN_ENDPOINTS])
async def test_admin_endpoint_credentials(memory: Memory, method: str, path: str, body: Any) -> None:
    app = secure(create_app(memory), RING)
    async with _client(app) as client:
        assert (await _call(client, method, path, body, None)).status_code == 401
        assert (await _call(client, method, path, body, "edb_not-a-key")).status_code == 401
        for key in (READER, WRITER, OTHER):  # read/write on the agent is not enough
            assert (await _call(client, method, path, body, key)).status_code == 403, key
        ok = await _call(client, method, path, body, ADMIN)
        assert ok.status_code == ADMIN_STATUS.get(path, 200), ok.text


async def test_strangers_get_401_before_any_validation_detail(memory: Memory) -> None:
    async with _client(secure(create_app(memory), RING)) as client:
        for body in ({"agent_id": "bad/id"}, "not json"):
            r = await client.post("/v1/retrieve", json=body)
            assert r.status_code == 401 and "agent_id" not in r.text


async def test_a_write_for_another_agent_is_refused_and_not_recorded(memory: Memory) -> None:
    victim = f"team-b:{uuid.uuid4().hex[:8]}"
    app = secure(create_app(memory), RING)
    async with _client(app) as client:
        r = await _call(client, "POST", "/v1/messages", {"agent_id": victim, "text": "I moved to Lima."}, WRITER)
        assert r.status_code == 403
        facts = await _call(client, "GET", f"/v1/agents/{victim}/facts", None, OTHER)
    assert facts.status_code == 200 and facts.json()["items"] == []


async def test_prefix_does_not_leak_to_longer_names(memory: Memory) -> None:
    app = secure(create_app(memory), RING)
    async with _client(app) as client:
        r = await _call(client, "GET", "/v1/agents/team-ab/facts", None, READER)  # 'team-a:*'
    assert r.status_code == 403


async def test_probes_stay_open(memory: Memory) -> None:
    app = secure(create_app(memory), RING)
    async with _client(app) as client:
        assert (await client.get("/healthz")).status_code == 200
        assert (await client.get("/readyz")).status_code in (200, 503)  # never 401: probes have no key
        assert (await client.get("/metrics")).status_code == 200  # scrapers carry no key either


async def test_without_keys_the_api_is_open(memory: Memory) -> None:
    async with _client(secure(create_app(memory), KeyRing())) as client:
        r = await _call(client, "GET", f"/v1/agents/{AGENT}/facts", None, None)
    assert r.status_code == 200


async def test_trusted_hosts(memory: Memory) -> None:
    app = secure(create_app(memory), RING, allowed_hosts("0.0.0.0", "mem.example.com"))
    for host, status in [("localhost:8787", 200), ("127.0.0.1", 200), ("mem.example.com", 200),
                         ("evil.example.net", 400)]:
        async with _client(app, host) as client:
            assert (await client.get("/healthz")).status_code == status, host
    assert "10.1.2.3" in allowed_hosts("10.1.2.3") and "0.0.0.0" not in allowed_hosts("0.0.0.0")


def test_non_loopback_bind_needs_keys(tmp_path: Path) -> None:
    for host in ("127.0.0.1", "::1", "localhost"):
        check_bind(host, KeyRing())
    check_bind("0.0.0.0", RING)
    settings = Settings(http_host="0.0.0.0", data_dir=tmp_path, database_url="postgresql://x@nowhere/x")
    with pytest.raises(SystemExit, match="ENGRAMDB_API_KEYS"):
        run_server("retrieve", settings)  # refuses before opening any database or broker


def test_keyring_sources(tmp_path: Path) -> None:
    inline = load_keyring(json.dumps([{"key": "edb_x", "agents": ["a"], "scopes": ["read"]}]), tmp_path)
    assert inline.find("edb_x") is not None and inline.find("edb_y") is None
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": [{"sha256": hash_key("edb_z"), "agents": ["*"], "scopes": ["admin"]}]}))
    assert load_keyring(str(path), tmp_path).find("edb_z") is not None
    assert not load_keyring(None, tmp_path)  # no file in the data dir: no keys
    for bad in ('[{"key": "k", "agents": [], "scopes": ["read"]}]', '[{"key": "k", "agents": ["a"], "scopes": ["root"]}]',
                "[not json", str(tmp_path / "missing.json")):
        with pytest.raises(ApiKeyConfigError):
            load_keyring(bad, tmp_path)


def test_keys_create_prints_once_and_stores_only_the_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAMDB_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("ENGRAMDB_API_KEYS", raising=False)
    result = CliRunner().invoke(cli_app, ["keys", "create", "--agents", "team-a:*", "--scope", "read"])
    assert result.exit_code == 0, result.output
    key = result.stdout.strip().splitlines()[0]
    stored = tmp_path / "api-keys.json"
    assert key.startswith("edb_") and key not in stored.read_text()
    assert os.stat(stored).st_mode & 0o777 == 0o600
    grant = load_keyring(None, tmp_path).find(key)  # serve picks the default file up
    assert grant is not None and grant.allows("read", "team-a:x") and not grant.allows("write", "team-a:x")
