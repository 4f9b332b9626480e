"""Issue 28 item 1: a key scoped to one tenant sees only that tenant, on every route and for
every scope — the probe's case was an admin key for ``tenant-y:*`` listing ``tenant-x:alice``
(with her counts) through ``GET /v1/agents``.

Two tenants, each with a read, a write and an admin key; every ``/v1`` and Mem0 route (the same list
the auth table test walks) is called with every key of the OTHER tenant and must refuse (403)
or, on the one route that spans agents, list nothing of the other tenant. Real PostgreSQL.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql

from engramdb.infra.api_keys import KeyRing
from engramdb.infra.database import es_env_from_url
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.entrypoints.http.auth import secure
from engramdb.services.memory.facade import Memory
from engramdb.services.memory.mem0_shapes import mem0_id

RUN = uuid.uuid4().hex[:6]
TENANTS = {"x": f"tenant-x{RUN}:", "y": f"tenant-y{RUN}:"}
SCOPES = ("read", "write", "admin")
KEYS = {(t, s): f"edb_{t}-{s}-key" for t in TENANTS for s in SCOPES}
RING = KeyRing.parse(  # each tenant: its agents and its Mem0 users' memories
    [{"key": k, "agents": [TENANTS[t] + "*", f"user:{TENANTS[t]}*"], "scopes": [s]}
     for (t, s), k in KEYS.items()],
    "tenant-walk",
)
ALICE = TENANTS["x"] + "alice"
BOB = TENANTS["y"] + "bob"
ALICE_MEM0 = f"user:{ALICE}"  # Mem0's user_id=ALICE lives in this engramdb agent


@pytest.fixture(scope="module")
def memory(pg_url: str) -> Iterator[Memory]:
    schema = f"tenant_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        env = es_env_from_url(pg_url, schema)
        with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
            mem.write(ALICE, "I live in Quenwick and my PIN is 4711.", speaker="Alice")
            mem.write(ALICE_MEM0, "I live in Quenwick and my PIN is 4711.", speaker="Alice")
            mem.write(BOB, "I live in Lima.", speaker="Bob")
            mem.wait_for_projections()
            yield mem
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def _routes(agent: str) -> list[tuple[str, str, Any]]:
    """Every per-agent ``/v1`` route, aimed at ``agent``."""
    base = f"/v1/agents/{agent}"
    return [
        ("POST", "/v1/retrieve", {"agent_id": agent, "query": "where does she live?"}),
        ("POST", "/v1/messages", {"agent_id": agent, "text": "I moved to Oslo."}),
        ("GET", f"{base}/facts", None),
        ("GET", f"{base}/facts/f-unknown", None),
        ("DELETE", f"{base}/facts/f-unknown", None),
        ("GET", f"{base}/facts/f-unknown/history", None),
        ("GET", f"{base}/history", None),
        ("GET", f"{base}/entities", None),
        ("GET", f"{base}/messages", None),
        ("POST", f"{base}/reprocess", None),
        ("POST", f"{base}/forget", {"actor": "walk"}),
        ("POST", f"{base}/erase", {"actor": "walk"}),
        ("POST", "/v1/facts", {"agent_id": agent, "facts": [{"subject": "Alice", "text": "Alice likes tea."}]}),
        ("POST", "/v1/webhooks", {"url": "http://hooks.example/alice", "agent_id": agent}),
    ]


def _mem0_routes(user: str, memory_id: str) -> list[tuple[str, str, Any]]:
    """Every Mem0 route that names a memory (``/v1/ping/`` names none: it only checks a key)."""
    return [
        ("POST", "/v3/memories/add/", {"messages": "I moved to Oslo.", "user_id": user}),
        ("POST", "/v3/memories/", {"user_id": user}),
        ("POST", "/v3/memories/search/", {"query": "where?", "user_id": user}),
        ("GET", f"/v1/memories/{memory_id}/", None),
        ("PUT", f"/v1/memories/{memory_id}/", {"text": "I live in Oslo."}),
        ("DELETE", f"/v1/memories/{memory_id}/", None),
        ("GET", f"/v1/memories/{memory_id}/history/", None),
        ("DELETE", f"/v1/memories/?user_id={user}", None),
    ]


def test_the_walk_covers_every_route() -> None:
    paths = create_app(None).openapi()["paths"]
    routes = {(m.upper(), p) for p, ops in paths.items() if p.startswith("/v1/") for m in ops}
    walked = {(m, p.replace(ALICE, "{agent_id}").replace("f-unknown", "{fact_id}"))
              for m, p, _ in _routes(ALICE)} | {("GET", "/v1/agents"), ("GET", "/v1/ping/")}
    walked |= {(m, p.replace("MID", "{memory_id}").split("?")[0])
               for m, p, _ in _mem0_routes(ALICE, "MID")}
    walked |= {("GET", "/v1/webhooks"), ("DELETE", "/v1/webhooks/{webhook_id}")}  # walked below
    paths3 = {(m.upper(), p) for p, ops in paths.items() if p.startswith("/v3/") for m in ops}
    assert routes | paths3 == walked


async def test_no_key_of_tenant_y_reaches_tenant_x(memory: Memory) -> None:
    app = secure(create_app(memory), RING)
    alice_fact = memory.list_facts(ALICE_MEM0).items[0].fact_id
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://localhost") as client:
        for scope in SCOPES:
            headers = {"Authorization": f"Bearer {KEYS[('y', scope)]}"}
            for method, path, body in _routes(ALICE):
                r = await client.request(method, path, json=body, headers=headers)
                assert r.status_code == 403, (scope, method, path, r.status_code, r.text)
                assert "Quenwick" not in r.text and "4711" not in r.text
            memory_id = mem0_id(alice_fact, ALICE_MEM0)
            for method, path, body in _mem0_routes(ALICE, memory_id):
                r = await client.request(method, path, json=body, headers=headers)
                assert r.status_code == 403, (scope, method, path, r.status_code, r.text)
                assert "Quenwick" not in r.text and "4711" not in r.text
            listed = await client.get("/v1/agents", headers=headers)
            if scope != "admin":
                assert listed.status_code == 403
                continue
            assert listed.status_code == 200, listed.text
            ids = [a["agent_id"] for a in listed.json()["items"]]
            assert ids == [BOB], ids  # its own tenant (and no Mem0 user of tenant-x)

        x_admin = {"Authorization": f"Bearer {KEYS[('x', 'admin')]}"}
        ids = [a["agent_id"] for a in (await client.get("/v1/agents", headers=x_admin)).json()["items"]]
        assert ids == [ALICE, ALICE_MEM0]
    # nothing the walk sent reached Alice: her memory is as it was
    assert [m.text for m in memory.list_messages(ALICE).items] == [
        "I live in Quenwick and my PIN is 4711."
    ]
    assert memory.list_facts(ALICE).items
    assert [f.fact_id for f in memory.list_facts(ALICE_MEM0).items] == [alice_fact]


async def test_a_tenants_admin_sees_and_deletes_only_its_webhooks(memory: Memory) -> None:
    """Webhooks carry an agent's changes out: a tenant-y admin may not register one for
    tenant-x, list tenant-x's, or delete them (a 404, as for an id that does not exist)."""
    app = secure(create_app(memory), RING)
    x_admin = {"Authorization": f"Bearer {KEYS[('x', 'admin')]}"}
    y_admin = {"Authorization": f"Bearer {KEYS[('y', 'admin')]}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://localhost") as client:
        made = await client.post("/v1/webhooks", json={"url": "http://hooks.example/x",
                                                       "agent_prefix": TENANTS["x"]}, headers=x_admin)
        assert made.status_code == 200, made.text
        hook_id = made.json()["webhook_id"]
        wide = await client.post("/v1/webhooks", json={"url": "http://hooks.example/all",
                                                       "agent_prefix": "tenant-"}, headers=y_admin)
        assert wide.status_code == 403  # a prefix wider than its tenant
        listed = await client.get("/v1/webhooks", headers=y_admin)
        assert listed.status_code == 200 and hook_id not in listed.text
        gone = await client.delete(f"/v1/webhooks/{hook_id}", headers=y_admin)
        assert gone.status_code == 404
        mine = await client.get("/v1/webhooks", headers=x_admin)
        assert hook_id in mine.text
        assert (await client.delete(f"/v1/webhooks/{hook_id}", headers=x_admin)).status_code == 200


def test_list_agents_patterns_page_exactly(memory: Memory) -> None:
    """The filter is in SQL, so a page of one still walks the tenant (no empty pages)."""
    extra = TENANTS["y"] + "carol"
    memory.write(extra, "I live in Quito.", speaker="Carol")
    memory.wait_for_projections()
    seen, cursor = [], None
    while True:
        page = memory.list_agents(limit=1, cursor=cursor, agents=[TENANTS["y"] + "*"])
        seen += [a.agent_id for a in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [BOB, extra]
    assert [a.agent_id for a in memory.list_agents(agents=[ALICE]).items] == [ALICE]
    like_chars = memory.list_agents(agents=[TENANTS["x"].replace("-", "_") + "*"])
    assert like_chars.items == []  # '_' is not a LIKE wildcard here
