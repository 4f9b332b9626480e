"""Memory management on every surface against the real servers: HTTP (the FastAPI app over
httpx's ASGI transport, backed by a real ``Memory``), NATS request/reply (real NATS server)
and the CLI (Typer's runner, its own ``Memory`` on the same database). Same names, same
semantics; user mistakes are 4xx / validation replies / exit code 2 with one line.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from faststream.nats import NatsBroker
from typer.testing import CliRunner

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.cli.main import app as cli_app
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.entrypoints.nats.manage import register_manage, request_manage
from engramdb.services.memory.facade import Memory
from tests.support.cli_env import point_cli_at


@pytest.fixture
def memory(fresh_schema: Any) -> Iterator[Memory]:
    _schema, env = fresh_schema("msurf")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield mem


def _seed(memory: Memory, agent: str) -> dict[str, str]:
    ids: dict[str, str] = {}
    for mid, text in (("m1", "I live in Recife."), ("m2", "I like sushi."), ("m3", "I work at Vertix.")):
        written = memory.write(agent, text, speaker="Ana", message_id=mid, session_id="s1")
        ids[mid] = next(d.fact_id for d in written.decisions if d.kind == "ADD" and d.fact_id)
    memory.wait_for_projections()
    return ids


async def test_http_manage_routes(memory: Memory, agent_id: str) -> None:
    ids = _seed(memory, agent_id)
    api = create_app(memory)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://t") as c:
        r = await c.get(f"/v1/agents/{agent_id}/facts", params={"limit": 2})
        assert r.status_code == 200, r.text
        first = r.json()
        assert len(first["items"]) == 2 and first["next_cursor"]
        r = await c.get(f"/v1/agents/{agent_id}/facts", params={"limit": 2, "cursor": first["next_cursor"]})
        assert [f["fact_id"] for f in first["items"] + r.json()["items"]] == list(ids.values())
        r = await c.get(f"/v1/agents/{agent_id}/facts", params={"text": "sushi"})
        assert [f["fact_id"] for f in r.json()["items"]] == [ids["m2"]]

        # unknown / invalid query parameters are 422s naming them, on new and existing routes
        r = await c.get(f"/v1/agents/{agent_id}/facts", params={"speakr": "Ana"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "speakr"]
        r = await c.get(f"/v1/agents/{agent_id}/facts", params={"cursor": "nope"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "cursor"]
        r = await c.get(f"/v1/agents/{agent_id}/facts", params={"as_of": "not-a-date"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "as_of"]
        r = await c.get(f"/v1/agents/{agent_id}/facts/{ids['m1']}/history", params={"x": "1"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "x"]
        r = await c.get(f"/v1/agents/{agent_id}/facts", params={"text": "a\x00b"})
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "text"]
        assert (await c.get(f"/v1/agents/{agent_id}/facts/f%00x")).status_code == 404
        r = await c.get("/v1/agents/bad%20agent/facts")
        assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["path", "agent_id"]

        r = await c.get(f"/v1/agents/{agent_id}/facts/{ids['m2']}")
        assert r.status_code == 200 and r.json()["sources"][0]["text"] == "I like sushi."
        assert r.json()["history"] == f"/v1/agents/{agent_id}/facts/{ids['m2']}/history"
        assert (await c.get(f"/v1/agents/{agent_id}/facts/f_nope")).status_code == 404

        r = await c.delete(f"/v1/agents/{agent_id}/facts/{ids['m2']}", params={"actor": "ana"})
        assert r.status_code == 200 and r.json()["status"] == "retracted"
        assert (await c.delete(f"/v1/agents/{agent_id}/facts/{ids['m2']}")).status_code == 409
        memory.wait_for_projections(r.json()["position"])
        history = (await c.get(f"/v1/agents/{agent_id}/facts/{ids['m2']}/history")).json()
        assert history[-1]["decision"] == "DELETE" and history[-1]["decided_by"]["actor"] == "ana"
        assert history[-1]["decided_by"]["via"] == "http"

        r = await c.get(f"/v1/agents/{agent_id}/entities")
        assert r.status_code == 200 and "Ana" in [e["display_name"] for e in r.json()["items"]]
        r = await c.get(f"/v1/agents/{agent_id}/messages", params={"session": "s1"})
        assert [(m["message_id"], m["hidden"]) for m in r.json()["items"]] == [
            ("m1", False), ("m2", True), ("m3", False)]
        r = await c.get("/v1/agents", params={"limit": 500})
        assert agent_id in [a["agent_id"] for a in r.json()["items"]]

        # dry-run write: the decisions, no event
        head = memory.app.recorder.max_notification_id()
        r = await c.post("/v1/messages", params={"dry_run": "true"},
                         json={"agent_id": agent_id, "text": "I moved to Lisbon.", "speaker": "Ana"})
        assert r.status_code == 200 and r.json()["dry_run"] is True
        assert "UPDATE" in [d["kind"] for d in r.json()["decisions"]]
        assert memory.app.recorder.max_notification_id() == head

        r = await c.post(f"/v1/agents/{agent_id}/forget", json={"actor": "admin"})
        assert r.status_code == 200 and r.json()["facts_ended"] == 2
        assert (await c.post("/v1/agents/never-seen-xyz/forget")).status_code == 404
        memory.wait_for_projections(r.json()["position"])
        assert (await c.get(f"/v1/agents/{agent_id}/facts")).json()["items"] == []

        # erasure (ADR-0018): then reads are empty, history says ERASE, writes are 410 Gone
        r = await c.post(f"/v1/agents/{agent_id}/erase", json={"actor": "dpo"})
        assert r.status_code == 200 and r.json()["already_erased"] is False, r.text
        assert (await c.post("/v1/agents/never-seen-xyz/erase")).status_code == 404
        memory.wait_for_projections(r.json()["position"])
        assert (await c.get(f"/v1/agents/{agent_id}/messages")).json()["items"] == []
        r = await c.post("/v1/messages", json={"agent_id": agent_id, "text": "I am back."})
        assert r.status_code == 410 and "erased" in r.json()["detail"]


async def test_nats_manage_request_reply(memory: Memory, agent_id: str, nats_url: str) -> None:
    ids = _seed(memory, agent_id)
    prefix = f"engramdb.manage.test{uuid.uuid4().hex[:8]}"
    broker = NatsBroker(nats_url)
    register_manage(broker, memory, prefix=prefix)
    await broker.start()
    try:
        async def ask(op: str, body: dict[str, Any]) -> dict[str, Any]:
            return await request_manage(broker, op, body, prefix=prefix)

        page = await ask("list_facts", {"agent_id": agent_id, "limit": 2})
        assert len(page["result"]["items"]) == 2 and page["result"]["next_cursor"]
        rest = await ask("list_facts", {"agent_id": agent_id, "cursor": page["result"]["next_cursor"]})
        assert [f["fact_id"] for f in page["result"]["items"] + rest["result"]["items"]] == list(ids.values())
        got = await ask("get_fact", {"agent_id": agent_id, "fact_id": ids["m1"]})
        assert got["result"]["sources"][0]["message_id"] == "m1"

        bad = await ask("list_facts", {"agent_id": agent_id, "speakr": "Ana"})
        assert bad["error_type"] == "validation" and "speakr" in bad["error"]
        bad = await ask("list_facts", {"agent_id": "bad agent"})
        assert bad["error_type"] == "validation" and "agent_id" in bad["error"]
        assert (await ask("get_fact", {"agent_id": agent_id, "fact_id": "f_x"}))["error_type"] == "not_found"
        assert (await ask("nope", {}))["error_type"] == "validation"

        deleted = await ask("delete_fact", {"agent_id": agent_id, "fact_id": ids["m2"], "actor": "bot"})
        assert deleted["result"]["status"] == "retracted"
        again = await ask("delete_fact", {"agent_id": agent_id, "fact_id": ids["m2"]})
        assert again["error_type"] == "conflict"
        memory.wait_for_projections(deleted["result"]["position"])
        msgs = await ask("list_messages", {"agent_id": agent_id})
        assert [m["message_id"] for m in msgs["result"]["items"] if m["hidden"]] == ["m2"]
        ents = await ask("list_entities", {"agent_id": agent_id})
        assert "Ana" in [e["display_name"] for e in ents["result"]["items"]]
        agents = await ask("list_agents", {"limit": 500})
        assert agent_id in [a["agent_id"] for a in agents["result"]["items"]]
        forgot = await ask("forget_agent", {"agent_id": agent_id, "actor": "admin"})
        assert forgot["result"]["facts_ended"] == 2
        erased = await ask("erase_agent", {"agent_id": agent_id, "actor": "admin"})
        assert erased["result"]["aggregates"] == 4  # the agent + its three message records
        assert (await ask("erase_agent", {"agent_id": agent_id}))["result"]["already_erased"]
        assert (await ask("erase_agent", {"agent_id": "nobody-xyz"}))["error_type"] == "not_found"
        gone = await ask("delete_fact", {"agent_id": agent_id, "fact_id": ids["m1"]})
        assert gone["error_type"] == "erased"
    finally:
        await broker.stop()


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, pg_url: str, fresh_schema: Any) -> str:
    schema, _env = fresh_schema("mcli")
    point_cli_at(monkeypatch, pg_url, schema)
    return schema


def test_cli_manage_commands(cli_env: str, agent_id: str) -> None:
    runner = CliRunner()

    def run(*args: str) -> Any:
        return runner.invoke(cli_app, list(args))

    dry = run("write", "--agent", agent_id, "--speaker", "Ana", "--dry-run", "--json", "I like sushi.")
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["dry_run"] is True
    empty = run("list-facts", "--agent", agent_id, "--json")
    assert empty.exit_code == 0 and json.loads(empty.stdout)["items"] == []

    out = run("write", "--agent", agent_id, "--speaker", "Ana", "--message-id", "m1", "I like sushi.")
    assert out.exit_code == 0 and "ADD" in out.stdout
    listed = run("list-facts", "--agent", agent_id, "--json")
    [fact] = json.loads(listed.stdout)["items"]
    shown = run("get-fact", "--agent", agent_id, "--fact", fact["fact_id"])
    assert shown.exit_code == 0 and "source m1" in shown.stdout
    for command in ("list-entities", "list-messages"):
        page = run(command, "--agent", agent_id, "--json")
        assert page.exit_code == 0 and json.loads(page.stdout)["items"], command
    agents = run("list-agents", "--json", "--limit", "500")
    assert agent_id in [a["agent_id"] for a in json.loads(agents.stdout)["items"]]

    deleted = run("delete-fact", "--agent", agent_id, "--fact", fact["fact_id"], "--actor", "me")
    assert deleted.exit_code == 0 and "retracted" in deleted.stdout
    messages = json.loads(run("list-messages", "--agent", agent_id, "--json").stdout)["items"]
    assert [m["hidden"] for m in messages] == [True]
    forgot = run("forget-agent", "--agent", agent_id, "--yes")
    assert forgot.exit_code == 0 and "0 facts ended" in forgot.stdout
    erased = run("erase", "--agent", agent_id, "--yes", "--json")
    assert erased.exit_code == 0 and json.loads(erased.stdout)["aggregates"] == 2, erased.output
    assert json.loads(run("list-messages", "--agent", agent_id, "--json").stdout)["items"] == []
    history = run("history", "--agent", agent_id)
    assert history.exit_code == 0 and "ERASE" in history.stdout, history.output
    refused = run("write", "--agent", agent_id, "I am back.")
    assert refused.exit_code == 2 and refused.stderr.splitlines()[-1].startswith(
        f"error: agent {agent_id!r} was erased"
    ), refused.stderr

    # user mistakes: one line on stderr, exit code 2, no traceback
    for args in (
        ("list-facts", "--agent", "bad agent!"),
        ("get-fact", "--agent", agent_id, "--fact", "f_nope"),
        ("delete-fact", "--agent", agent_id, "--fact", fact["fact_id"]),
        ("list-facts", "--agent", agent_id, "--cursor", "junk"),
        ("list-facts", "--agent", agent_id, "--valid-at", "yesterday"),
        ("list-facts", "--agent", agent_id, "--status", "gone"),
    ):
        bad = run(*args)
        assert bad.exit_code == 2, (args, bad.output)
        assert bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1, bad.stderr
        assert "Traceback" not in bad.output
