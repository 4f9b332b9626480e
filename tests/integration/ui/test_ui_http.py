"""The inspector's HTTP contract without a browser (httpx over the ASGI app, real Memory):
security headers on every page, CSRF on every state change, the session cookie's
attributes, loopback-only without keys, bad input as 4xx pages, /ui kept out of OpenAPI."""

from __future__ import annotations

import re
import uuid
from typing import Any

import httpx
import pytest
from conftest import ADMIN_KEY, READ_KEY

from engramdb.infra.api_keys import KeyRing
from engramdb.services.entrypoints.cli.demo import AGENT
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.entrypoints.http.auth import secure
from engramdb.services.memory.facade import Memory

PAGES = ["/ui/agents", f"/ui/agents/{AGENT}", f"/ui/agents/{AGENT}/entities",
         f"/ui/agents/{AGENT}/conversation", f"/ui/agents/{AGENT}/patterns",
         f"/ui/agents/{AGENT}/time", f"/ui/agents/{AGENT}/retrieve?q=Ana", "/ui/ops"]


def _client(app: Any, client: tuple[str, int] = ("127.0.0.1", 5555)) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=client),
                             base_url="http://127.0.0.1", follow_redirects=False)


def _keyed(memory: Memory) -> Any:
    ring = KeyRing.parse([
        {"id": "reader", "key": READ_KEY, "agents": ["*"], "scopes": ["read"]},
        {"id": "boss", "key": ADMIN_KEY, "agents": ["*"], "scopes": ["admin"]},
    ], "test")
    return secure(create_app(memory), ring)


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "page has no CSRF field"
    return found.group(1)


async def test_every_page_has_the_security_headers(ui_memory: Memory) -> None:
    async with _client(create_app(ui_memory)) as c:
        for path in PAGES:
            r = await c.get(path)
            assert r.status_code == 200, (path, r.text[:500])
            csp = r.headers["content-security-policy"]
            assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
            assert "unsafe-inline" not in csp
            assert r.headers["x-frame-options"] == "DENY"
            assert r.headers["x-content-type-options"] == "nosniff"
            assert r.headers["cache-control"] == "no-store"
            assert "<script>" not in r.text and " on" + "error=" not in r.text
            assert re.search(r"<script(?![^>]*\bsrc=)", r.text) is None  # no inline script


async def test_state_changes_need_the_csrf_token(ui_memory: Memory) -> None:
    fact = ui_memory.list_facts(AGENT, text="Vertix").items[0]
    path = f"/ui/agents/{AGENT}/facts/{fact.fact_id}/delete"
    async with _client(create_app(ui_memory)) as c:
        r = await c.post(path, content=b"", headers={"content-type": "application/x-www-form-urlencoded"})
        assert r.status_code == 403 and "CSRF" in r.text
        confirm = await c.get(path)
        token = _csrf(confirm.text)
        r = await c.post(path, data={"csrf": token + "x"})
        assert r.status_code == 403
        r = await c.post(path, data={"csrf": token}, headers={"origin": "http://evil.example"})
        assert r.status_code == 403 and "origin" in r.text
        for action in ("forget", "erase", "reprocess"):
            r = await c.post(f"/ui/agents/{AGENT}/{action}", data={"confirm_agent": AGENT})
            assert r.status_code == 403
        for path in ("/ui/login", "/ui/logout"):  # a forged login or logout is refused too
            r = await c.post(path, data={"key": READ_KEY})
            assert r.status_code == 403 and "CSRF" in r.text
    assert ui_memory.get_fact(AGENT, fact.fact_id).status == "active"


async def test_login_sets_a_strict_httponly_expiring_cookie(ui_memory: Memory) -> None:
    async with _client(_keyed(ui_memory)) as c:
        r = await c.get(f"/ui/agents/{AGENT}")
        assert r.status_code == 401 and 'id="key"' in r.text and "Recife" not in r.text
        token = _csrf(r.text)
        r = await c.post("/ui/login", data={"csrf": token, "key": "wrong"})
        assert r.status_code == 401 and "wrong" not in r.text
        r = await c.post("/ui/login", data={"csrf": token, "key": READ_KEY})
        assert r.status_code == 303
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        assert "Max-Age=28800" in cookie and "Path=/ui" in cookie
        assert READ_KEY not in r.headers["location"] and READ_KEY not in cookie
        r = await c.get(f"/ui/agents/{AGENT}")
        assert r.status_code == 200 and "Porto Alegre" in r.text
        assert (await c.get("/ui/ops")).status_code == 403  # admin only
        assert (await c.post("/ui/logout", data={"csrf": _csrf(r.text)})).status_code == 303
        assert (await c.get(f"/ui/agents/{AGENT}")).status_code == 401


async def test_without_keys_only_loopback_sees_data(ui_memory: Memory) -> None:
    app = create_app(ui_memory)
    async with _client(app, client=("203.0.113.7", 4000)) as c:
        for path in PAGES:
            r = await c.get(path)
            assert r.status_code == 401, path
            assert "Ana" not in r.text and "loopback" in r.text
    async with _client(app) as c:
        assert (await c.get("/ui/agents")).status_code == 200


@pytest.mark.parametrize("path, status", [
    (f"/ui/agents/{AGENT}/time?at=not-a-time", 400),
    (f"/ui/agents/{AGENT}/time?at=99999-01-01", 400),
    (f"/ui/agents/{AGENT}/time?t1=2026-01-01", 400),
    (f"/ui/agents/{AGENT}?cursor=nope", 400),
    (f"/ui/agents/{AGENT}?status=bogus", 400),
    (f"/ui/agents/{AGENT}/facts/no-such-fact", 404),
    (f"/ui/agents/{AGENT}/retrieve?q=x&as_of=yesterday", 400),
    ("/ui/agents/bad%20agent%20id", 400),
    (f"/ui/agents/{AGENT}?speakr=Ana", 422),
    ("/ui/static/../../api.py", 404),
])
async def test_bad_input_is_a_4xx_page(ui_memory: Memory, path: str, status: int) -> None:
    async with _client(create_app(ui_memory)) as c:
        r = await c.get(path)
    assert r.status_code == status, r.text[:500]
    assert "Traceback" not in r.text


async def test_ui_is_not_in_the_openapi_document(ui_memory: Memory) -> None:
    spec = create_app(memory=None).openapi()
    assert not [p for p in spec["paths"] if p.startswith("/ui")]


async def test_operations_lists_dead_letters_with_their_reason(ui_memory: Memory, nats_url: str) -> None:
    """A poison message through the real ingest consumer becomes a dead letter; the
    operations page reads it back from the dead-letter stream, reason and payload shown
    escaped."""
    import time
    import uuid

    import anyio

    from engramdb.services.entrypoints.nats.ingest import IngestThread, build_ingest_app
    from engramdb.services.entrypoints.nats.publisher import MessagePublisher

    prefix = f"ui{uuid.uuid4().hex[:8]}"
    ingest_app, _broker = build_ingest_app(nats_url, ui_memory.ingest_pipeline(), prefix=prefix)
    ingest = IngestThread(ingest_app).start()
    app = create_app(ui_memory)
    app.state.subject_prefix = prefix
    try:
        async with MessagePublisher(nats_url, prefix) as pub:
            await pub.publish_raw(AGENT, b"<script>not json</script>")
        ui_memory.nats_url = nats_url
        deadline = time.monotonic() + 30
        async with _client(app) as c:
            while True:
                r = await c.get("/ui/ops")
                assert r.status_code == 200
                if "No dead letters" not in r.text and "Dead letters" in r.text and "validation" in r.text:
                    break
                assert time.monotonic() < deadline, r.text[-3000:]
                await anyio.sleep(0.2)
        section = r.text[r.text.index('id="d-h"'):]
        assert "&lt;script&gt;not json&lt;/script&gt;" in section and "<script>not" not in section
        row = section[section.index("<tbody>"):section.index("</tbody>")]
        assert "<td>validation</td>" in row and "JSON" in row  # the stage and the reason
    finally:
        ui_memory.nats_url = None
        ingest.stop()


def test_engramdb_ui_serves_the_inspector(ui_schema: tuple[str, dict[str, str]], pg_url: str,
                                          nats_url: str, ui_memory: Memory) -> None:
    """``engramdb ui`` as a process, on the deployment its settings name."""
    import os
    import subprocess
    import sys
    import time

    from tests.support.live_http import free_port

    schema, _env = ui_schema
    port = free_port()
    env = {**os.environ, "ENGRAMDB_DATABASE_URL": pg_url, "ENGRAMDB_DB_SCHEMA": schema,
           "ENGRAMDB_NATS_URL": nats_url, "ENGRAMDB_EMBEDDING_MODEL": "hash-bow-384",
           "ENGRAMDB_LLM_API_KEY": "", "ENGRAMDB_LLM_BASE_URL": "", "ENGRAMDB_API_KEYS": ""}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engramdb.services.entrypoints.cli.main", "ui", "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/ui/agents/{AGENT}", timeout=5)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "engramdb ui did not start"
                time.sleep(0.3)
        assert r.status_code == 200 and "Porto Alegre" in r.text
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]
    finally:
        proc.terminate()
        proc.wait(30)


async def test_forget_and_reprocess_go_through_the_facade(ui_memory: Memory) -> None:
    agent = "forget-me"
    ui_memory.write(agent, "I live in Natal and I love surfing.", speaker="Lia", message_id="f1")
    ui_memory.wait_for_projections()
    assert ui_memory.list_facts(agent).items
    async with _client(create_app(ui_memory)) as c:
        confirm = await c.get(f"/ui/agents/{agent}/forget")
        assert confirm.status_code == 200 and "Forget agent" in confirm.text
        r = await c.post(f"/ui/agents/{agent}/forget", data={"csrf": _csrf(confirm.text)})
        assert r.status_code == 303
        page = await c.get(r.headers["location"])
        assert "∅ forgotten" in page.text
        confirm = await c.get(f"/ui/agents/{agent}/reprocess")
        r = await c.post(f"/ui/agents/{agent}/reprocess", data={"csrf": _csrf(confirm.text)})
        assert r.status_code == 200 and "Extracted 0" in r.text
        assert (await c.get("/ui")).status_code in (303, 307)
    assert ui_memory.list_facts(agent).items == []
    forgets = [h for h in ui_memory.history(agent) if h.decision == "FORGET"]
    assert forgets and forgets[0].decided_by.get("via") == "ui"


async def test_a_tenants_key_lists_only_its_tenants_agents(ui_memory: Memory) -> None:
    """ADR-0051: the agent list is filtered by the key's agents in SQL (not dropped from a
    fetched page), so a tenant's admin sees its own agents and nothing of the others."""
    for agent in ("tenant-x:alice", "tenant-y:bob"):
        written = ui_memory.write(agent, f"I live in Lisbon, says {agent}.", speaker="U")
        ui_memory.wait_for_projections(written.position, agent_id=agent)
    ring = KeyRing.parse([{"id": "y-admin", "key": ADMIN_KEY, "agents": ["tenant-y:*"],
                           "scopes": ["admin"]}], "test")
    async with _client(secure(create_app(ui_memory), ring)) as c:
        login = await c.get("/ui/agents")
        r = await c.post("/ui/login", data={"csrf": _csrf(login.text), "key": ADMIN_KEY})
        assert r.status_code == 303
        page = await c.get("/ui/agents")
        assert page.status_code == 200 and "tenant-y:bob" in page.text
        assert "tenant-x:alice" not in page.text and AGENT not in page.text
        searched = await c.get("/ui/agents?q=tenant-x")
        assert searched.status_code == 200 and "tenant-x:alice" not in searched.text


async def test_a_tenants_admin_sees_only_its_rows_on_operations(ui_memory: Memory,
                                                                nats_url: str) -> None:
    """Issue 28 item 1 on the inspector: ``/ui/ops`` checked "admin somewhere", so a tenant's
    admin saw every tenant's job runs and dead letters (payloads inline) and the erasure
    markers. Now it sees its own agents' rows; a key for every agent sees them all."""
    import nats as nats_client

    from engramdb.services.jobs.base import JobContext
    from engramdb.services.jobs.runner import run_pass
    from engramdb.services.write.messages import (
        DeadLetter,
        deadletter_stream_name,
        deadletter_subject,
        message_subject,
    )

    run = uuid.uuid4().hex[:6]
    x, y, gone = f"opsx{run}:alice", f"opsy{run}:bob", f"opsx{run}:gone"
    for agent in (x, y, gone):
        for i in range(4):  # enough for a consolidation pattern: the jobs record a run
            ui_memory.write(agent, f"I live in Lisbon and love tea number {i}.", speaker="U")
    ui_memory.wait_for_projections()
    run_pass(JobContext(ui_memory), agents=[x, y])
    ui_memory.erase_agent(gone)
    prefix = f"uiops{run}"
    nc = await nats_client.connect(nats_url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=deadletter_stream_name(prefix), subjects=[deadletter_subject(prefix)])
        for who in (x, y, None):
            letter = DeadLetter(reason="test", stage="processing", agent_id=who,
                                subject=message_subject(who or "nobody", prefix),
                                payload=f"secret of {who or 'nobody'}")
            await js.publish(deadletter_subject(prefix), letter.model_dump_json().encode())
    finally:
        await nc.close()
    ring = KeyRing.parse([
        {"id": "y-admin", "key": f"edb_y{run}", "agents": [f"opsy{run}:*"], "scopes": ["admin"]},
        {"id": "all-admin", "key": f"edb_all{run}", "agents": ["*"], "scopes": ["admin"]},
    ], "test")
    app = secure(create_app(ui_memory), ring)
    app.state.subject_prefix = prefix
    ui_memory.nats_url = nats_url
    pages = {}
    try:
        for key in (f"edb_y{run}", f"edb_all{run}"):
            async with _client(app) as c:
                login = await c.get("/ui/login")
                r = await c.post("/ui/login", data={"csrf": _csrf(login.text), "key": key})
                assert r.status_code == 303
                r = await c.get("/ui/ops")
                assert r.status_code == 200, r.text[-2000:]
                pages[key] = r.text
    finally:
        ui_memory.nats_url = None
    tenant, everyone = pages[f"edb_y{run}"], pages[f"edb_all{run}"]
    assert y in tenant and "secret of " + y in tenant  # its own job runs and letters
    assert x not in tenant and "secret of nobody" not in tenant
    assert "No agent was erased." in tenant  # markers name no agent: not for a tenant
    assert x in everyone and "secret of " + x in everyone and "secret of nobody" in everyone
    assert "No agent was erased." not in everyone


async def test_lineage_shows_the_recorded_llm_output_escaped(pg_url: str) -> None:
    """Issue 23 item 3: the decision step shows what the LLM answered when it read the source
    message (``Processed.raw_output``, in the log only), as inert text."""
    import json
    import uuid
    from collections.abc import Sequence

    import psycopg
    from psycopg import sql

    from engramdb.infra.database import es_env_from_url
    from engramdb.infra.providers.scripted import HashEmbedder, ScriptedLLM
    from engramdb.services.extraction.llm_extractor import LLMExtractor

    def message_of(messages: Sequence[dict[str, Any]]) -> str:
        return messages[-1]["content"].split('Message:\n"""\n', 1)[1].rsplit('\n"""', 1)[0]

    said = "I moved to Lisbon last spring."
    answer = json.dumps({"facts": [{"text": "Rui lives in Lisbon <script>x</script>",
                                    "entity": "Rui", "category": "personal"}],
                         "entities": [{"name": "Rui", "entity_type": "person"}],
                         "relationships": []})
    schema = f"uillm_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        extractor = LLMExtractor(ScriptedLLM({said: answer}, key_fn=message_of))
        with Memory.open(env=es_env_from_url(pg_url, schema), embedder=HashEmbedder(384),
                         llm=None, extractor=extractor, quiet=True) as memory:
            memory.write("llm-agent", said, speaker="Rui", message_id="m1")
            memory.write("llm-agent", "Hello.", speaker="Rui", message_id="m2", infer=False)
            memory.wait_for_projections()
            fact = memory.list_facts("llm-agent").items[0]
            assert fact.decided_by["extractor"] == "llm"
            async with _client(create_app(memory)) as c:
                r = await c.get(f"/ui/agents/llm-agent/facts/{fact.fact_id}")
            assert r.status_code == 200, r.text[:500]
            shown = r.text[r.text.index('id="dec-h"'):r.text.index('id="ver-h"')]
            assert "Recorded LLM output for <code>m1</code>" in shown
            assert "Rui lives in Lisbon &lt;script&gt;x&lt;/script&gt;" in shown
            assert "<script>x" not in r.text
            assert memory.extraction_outputs("llm-agent", ["m1", "m2", "nope"]).keys() == {"m1"}
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def test_main_pages_stay_light(ui_memory: Memory) -> None:
    """Issue 23: "keep page weight small". Every main page, HTML plus the CSS and JS it links,
    on the demo agent and on a 1,000-fact agent (pages of 50, so more facts weigh no more),
    stays under 100 kB; the figures are printed for the closing note (``-s``)."""
    from tests.support.ui_seed import seed_agent

    big = "weights-1000"
    with ui_memory.cell(big).pool.connection() as conn, conn.transaction():
        seed_agent(conn, big, 1000)
    mid, end = "2026-01-01T12:00:00%2B00:00", "2026-12-31T00:00:00%2B00:00"
    budget = 100_000
    async with _client(create_app(ui_memory)) as c:
        assets = {}
        for agent in (AGENT, big):
            a = f"/ui/agents/{agent}"
            fact = ui_memory.list_facts(agent).items[0].fact_id
            for name, path in {
                "agents": "/ui/agents", "facts": a, "entities+graph": f"{a}/entities",
                "conversation": f"{a}/conversation", "patterns": f"{a}/patterns",
                "lineage": f"{a}/facts/{fact}", "time (as of)": f"{a}/time?at={mid}",
                "time+diff": f"{a}/time?at={mid}&t1={mid}&t2={end}",
                "retrieve": f"{a}/retrieve?q=Where+does+Ana+live", "ops": "/ui/ops",
                "login": "/ui/login",
            }.items():
                r = await c.get(path)
                assert r.status_code == 200, (path, r.text[:300])
                linked = re.findall(r'(?:href|src)="(/ui/static/[^"]+)"', r.text)
                assert linked, path  # the page's own CSS/JS, nothing from elsewhere
                for url in linked:
                    if url not in assets:
                        assets[url] = len((await c.get(url)).content)
                total = len(r.content) + sum(assets[u] for u in set(linked))
                print(f"page weight {agent:>14} {name:<14} HTML {len(r.content):>7,} B, "
                      f"with CSS+JS {total:>7,} B")
                assert total <= budget, (path, total)
        assert not re.search(r'(?:href|src)="(?:https?:)?//', r.text)  # no CDN


async def test_filters_diff_as_of_retrieve_and_health_show_what_they_claim(
    ui_memory: Memory, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 23 items 2, 4, 5, 6 beyond the browser scenarios: the speaker / session /
    validity filters, a diff's added rows, a retrieve as of an instant, the health line;
    and a key sent to the login page appears in no log record."""
    import html
    import logging
    from datetime import timedelta
    from urllib.parse import quote

    def texts(body: str) -> list[str]:
        """The fact column of the facts table (the first cell of each row)."""
        return [html.unescape(t) for t in re.findall(r'<tr><td><bdi class="ut">([^<]*)</bdi></td>', body)]

    recife = next(f for f in ui_memory.list_facts(AGENT, status="all").items if "Recife" in f.text)
    then = max(recife.valid_from, recife.recorded_at) + timedelta(milliseconds=1)  # true and known
    a = f"/ui/agents/{AGENT}"
    async with _client(create_app(ui_memory)) as c:
        for query, expected in [
            ("?speaker=Ana", ui_memory.list_facts(AGENT, speaker="Ana").items),
            ("?speaker=Nobody", []),
            ("?session=s1&status=all", ui_memory.list_facts(AGENT, session="s1", status="all").items),
            (f"?status=all&valid_at={quote(then.isoformat())}",
             ui_memory.list_facts(AGENT, status="all", valid_at=then).items),
        ]:
            r = await c.get(a + query)
            assert r.status_code == 200, (query, r.text[:300])
            assert sorted(texts(r.text)) == sorted(f.text for f in expected), query
            assert expected or "No facts." in r.text
        held_then = [f.text for f in ui_memory.list_facts(AGENT, status="all", valid_at=then).items]
        assert "Ana lives in Recife" in held_then and not any("Porto" in t for t in held_then)
        r = await c.get(f"{a}/time?t1=2000-01-01T00:00:00%2B00:00&t2={quote(then.isoformat())}")
        added = re.findall(r'<tr class="added"><td>\+ added</td>', r.text)
        assert r.status_code == 200 and len(added) >= 2 and "Ana lives in Recife" in r.text
        r = await c.get(f"{a}/retrieve?q=Where+does+Ana+live%3F&as_of={quote(then.isoformat())}")
        context = html.unescape(r.text.split('id="context"', 1)[1].split("</pre>", 1)[0])
        assert r.status_code == 200 and "Recife" in context and "Porto Alegre" not in context
        r = await c.get("/ui/ops")
        assert "✔ ready" in r.text and "max lag" in r.text and "Projections (lag" in r.text
    caplog.set_level(logging.DEBUG)
    async with _client(_keyed(ui_memory)) as c:
        login = await c.get("/ui/login")
        for key in (READ_KEY, "not-a-key-" + READ_KEY[::-1]):
            await c.post("/ui/login", data={"csrf": _csrf(login.text), "key": key})
        assert (await c.get(f"/ui/agents/{AGENT}")).status_code == 200
    assert READ_KEY not in caplog.text and READ_KEY[::-1] not in caplog.text


async def test_lineage_leaves_out_what_the_decider_did_not_record(ui_memory: Memory) -> None:
    """The decision step lists what ``decided_by`` holds; a key left empty (the rule-based
    extractor names no model) is not printed as "null"."""
    fact = next(f for f in ui_memory.list_facts(AGENT).items if f.decided_by.get("extractor"))
    empty = sorted(k for k, v in fact.decided_by.items() if v is None)
    async with _client(create_app(ui_memory)) as c:
        r = await c.get(f"/ui/agents/{AGENT}/facts/{fact.fact_id}")
    assert r.status_code == 200, r.text[:500]
    shown = r.text[r.text.index('id="dec-h"'):r.text.index('id="ver-h"')]
    assert "null" not in shown, shown
    assert f"<dd><bdi class=\"ut\">{fact.decided_by['extractor']}</bdi></dd>" in shown
    assert empty  # the demo's rule-based decisions leave ``model`` empty
    for key in empty:
        assert f"<dt>{key}</dt>" not in shown


async def test_lineage_after_a_reprocess_shows_the_output_each_fact_came_from(pg_url: str) -> None:
    """A message extracted, then reprocessed with another answer: the first fact (ended by the
    reprocess) shows the LLM output it came from, the new fact the new output — not both the
    newest (``audit.extraction_outputs(fact_id=...)``)."""
    import json
    import uuid
    from collections.abc import Sequence

    import psycopg
    from psycopg import sql

    from engramdb.infra.database import es_env_from_url
    from engramdb.infra.providers.scripted import HashEmbedder, ScriptedLLM
    from engramdb.services.extraction.llm_extractor import LLMExtractor

    def message_of(messages: Sequence[dict[str, Any]]) -> str:
        return messages[-1]["content"].split('Message:\n"""\n', 1)[1].rsplit('\n"""', 1)[0]

    def answer(city: str) -> str:
        return json.dumps({"facts": [{"text": f"Rui lives in {city}", "entity": "Rui", "category": "personal"}],
                           "entities": [{"name": "Rui", "entity_type": "person"}], "relationships": []})

    said = "I moved last spring."
    schema = f"uirep_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    try:
        extractor = LLMExtractor(ScriptedLLM({said: [answer("Lisbon"), answer("Porto")]}, key_fn=message_of))
        with Memory.open(env=es_env_from_url(pg_url, schema), embedder=HashEmbedder(384),
                         llm=None, extractor=extractor, quiet=True) as memory:
            memory.write("rep-agent", said, speaker="Rui", message_id="m1")
            memory.wait_for_projections()
            memory.reprocess("rep-agent", "m1")
            memory.wait_for_projections()
            facts = {f.text: f for f in memory.list_facts("rep-agent", status="all").items}
            old, new = facts["Rui lives in Lisbon"], facts["Rui lives in Porto"]
            assert old.status != "active" and new.status == "active"
            shown = {}
            async with _client(create_app(memory)) as c:
                for fact in (old, new):
                    r = await c.get(f"/ui/agents/rep-agent/facts/{fact.fact_id}")
                    assert r.status_code == 200, r.text[:500]
                    shown[fact.text] = r.text[r.text.index('id="dec-h"'):r.text.index('id="ver-h"')]
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    assert "Rui lives in Lisbon" in shown["Rui lives in Lisbon"] and "Porto" not in shown["Rui lives in Lisbon"]
    assert "Rui lives in Porto" in shown["Rui lives in Porto"] and "Lisbon" not in shown["Rui lives in Porto"]


async def test_facts_page_filters_by_metadata_and_echoes_it_inert(ui_memory: Memory) -> None:
    """The facts page takes the metadata filter every list takes (issue 24): in SQL (the demo's
    turns carry no metadata, so a value matches nothing and its negation everything), echoed
    escaped in its input and in the pager; a bad or hostile filter is a 400 page, inert."""
    import html
    from urllib.parse import quote

    a = f"/ui/agents/{AGENT}"
    every = ui_memory.list_facts(AGENT).items
    async with _client(create_app(ui_memory)) as c:
        none = await c.get(a + "?metadata=" + quote('{"channel": "slack"}'))
        assert none.status_code == 200 and "No facts." in none.text
        assert 'value="{&#34;channel&#34;: &#34;slack&#34;}"' in none.text or \
            'value="{&quot;channel&quot;: &quot;slack&quot;}"' in none.text, none.text[:2000]
        kept = await c.get(a + "?metadata=" + quote('{"NOT": [{"channel": "slack"}]}'))
        assert kept.status_code == 200
        shown = [html.unescape(t) for t in re.findall(r'<tr><td><bdi class="ut">([^<]*)</bdi></td>', kept.text)]
        assert every and sorted(shown) == sorted(f.text for f in every)
        for bad in ("{oops", '{"channel": {"like": "s"}}', '"<script>alert(1)</script>"',
                    '{"<img src=x onerror=alert(1)>": {"bogus": 1}}', "[" * 990 + "]" * 990):
            r = await c.get(a + "?metadata=" + quote(bad))
            assert r.status_code == 400, (bad[:40], r.status_code)
            assert "metadata" in r.text and "<script>alert" not in r.text and "<img src=x" not in r.text
            assert "Traceback" not in r.text
