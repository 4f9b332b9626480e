"""Issue 28 item 6: the probe's smaller contract breaks, each on real servers.

- ``GET /v1/agents/A/facts?as_of=9999-12-31T23:59:59-14:00`` (and year 1, ``valid_at=1800``)
  was a 200 while retrieve refused the same with 422 (ADR-0012): now a 422 naming the rule;
- an unknown query parameter was a 422 listing the accepted ones before the key was checked
  (ADR-0011: the key comes first): now a 401 for a stranger, the 422 for a key holder;
- ``history --fact <unknown>`` exited 0 silently: now exit 2 (HTTP 404, ``get-fact`` exit 2);
- ``status --max-lag -5`` was accepted; ``nats-user create --agent '>'`` was accepted;
- ``jobs history --agent <erased>`` ended in an ``AttributeError`` traceback;
- an erased agent's job runs stayed in ``mem_job_runs`` (see ``test_erasure_disk``).
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from engramdb.infra.api_keys import KeyRing
from engramdb.infra.embedded_nats import ensure_nats
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.cli.main import app as cli_app
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.entrypoints.http.auth import secure
from engramdb.services.jobs.base import JobContext
from engramdb.services.jobs.runner import run_pass
from engramdb.services.memory.facade import Memory
from engramdb.services.write.messages import ConversationMessage
from tests.support.fault_harness import Serve, publish, wait_for

KEY = "edb_contract-key"
RING = KeyRing.parse([{"key": KEY, "agents": ["*"], "scopes": ["admin"]}], "contract")


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, pg_url: str, fresh_schema: Any, tmp_path: Any) -> Any:
    schema, env = fresh_schema("contract")
    monkeypatch.setenv("ENGRAMDB_DATABASE_URL", pg_url)
    monkeypatch.setenv("ENGRAMDB_DB_SCHEMA", schema)
    monkeypatch.setenv("ENGRAMDB_EMBEDDING_MODEL", "hash-bow-384")
    monkeypatch.setenv("ENGRAMDB_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("ENGRAMDB_NATS_URL", raising=False)
    monkeypatch.delenv("ENGRAMDB_LLM_API_KEY", raising=False)
    return env


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost")


@pytest.mark.parametrize("query", [
    "as_of=9999-12-31T23:59:59-14:00", "as_of=0001-01-01T00:00:00%2B14:00",
    "valid_at=1800-01-01T00:00:00Z", "as_of=2200-01-01T00:00:00Z",
])
async def test_fact_filters_keep_adr_0012s_window(cli_env: Any, query: str) -> None:
    agent = f"contract-{uuid.uuid4().hex[:6]}"
    with Memory.open(env=cli_env, embedder=HashEmbedder(384), llm=None, quiet=True) as memory:
        memory.write(agent, "I live in Recife.")
        async with _client(create_app(memory)) as client:
            bad = await client.get(f"/v1/agents/{agent}/facts?{query}")
            ok = await client.get(f"/v1/agents/{agent}/facts?as_of=2100-01-01T00:00:00Z")
            retrieve = await client.post("/v1/retrieve", json={
                "agent_id": agent, "query": "where?", "as_of": "9999-12-31T23:59:59-14:00"})
    assert bad.status_code == 422, bad.text
    assert "1900-01-01" in bad.text and "Traceback" not in bad.text
    assert ok.status_code == 200
    assert retrieve.status_code == 422  # the same rule on both surfaces


async def test_the_key_comes_before_an_unknown_query_parameter(cli_env: Any) -> None:
    with Memory.open(env=cli_env, embedder=HashEmbedder(384), llm=None, quiet=True) as memory:
        app = secure(create_app(memory), RING)
        async with _client(app) as client:
            path = "/v1/agents/contract-a/facts?no_such_filter=1"
            stranger = await client.get(path)
            wrong = await client.get(path, headers={"Authorization": "Bearer edb_nope"})
            holder = await client.get(path, headers={"Authorization": f"Bearer {KEY}"})
    for r in (stranger, wrong):
        assert r.status_code == 401 and "no_such_filter" not in r.text and "accepts" not in r.text
    assert holder.status_code == 422 and "no_such_filter" in holder.text


def test_cli_contracts(cli_env: Any) -> None:
    runner = CliRunner()
    agent = f"contract-{uuid.uuid4().hex[:6]}"
    with Memory.open(env=cli_env, embedder=HashEmbedder(384), llm=None, quiet=True) as memory:
        for i in range(4):  # enough for a consolidation pattern: the jobs record something
            memory.write(agent, f"I live in Recife and I love tea number {i}.", speaker="Ana")
        memory.wait_for_projections()
        run_pass(JobContext(memory), agents=[agent])
    before = runner.invoke(cli_app, ["jobs", "history", "--agent", agent])
    assert before.exit_code == 0 and before.output.strip(), before.output  # events to show
    unknown = runner.invoke(cli_app, ["history", "--agent", agent, "--fact", "f-unknown"])
    assert unknown.exit_code == 2 and "f-unknown" in unknown.output
    assert runner.invoke(cli_app, ["history", "--agent", agent]).exit_code == 0

    lag = runner.invoke(cli_app, ["status", "--max-lag", "-5"])
    assert lag.exit_code == 2, lag.output

    wildcard = runner.invoke(cli_app, ["nats-user", "create", "--agent", ">"])
    assert wildcard.exit_code == 2 and "not valid" in wildcard.output, wildcard.output

    erased = runner.invoke(cli_app, ["erase", "--agent", agent, "--yes"])
    assert erased.exit_code == 0, erased.output
    jobs = runner.invoke(cli_app, ["jobs", "history", "--agent", agent])
    assert jobs.exit_code == 0 and jobs.exception is None, jobs.output


def test_a_turn_for_an_erased_agent_is_dropped_without_a_traceback(
    pg_url: str, fresh_schema: Any, tmp_path: Any
) -> None:
    schema, _env = fresh_schema("erasedturn")
    tmp_path.chmod(0o755)
    nc = ensure_nats(tmp_path / "nats", stop_on_exit=False)
    serve = Serve.start(tmp_path / "serve.log", ENGRAMDB_DATA_DIR=str(tmp_path / "serve"),
                        ENGRAMDB_DATABASE_URL=pg_url, ENGRAMDB_DB_SCHEMA=schema,
                        ENGRAMDB_NATS_URL=nc.url)
    try:
        agent = "erased-turn"
        assert serve.post("/v1/messages", {"agent_id": agent, "text": "I live in Recife."})[0] == 200
        assert serve.post(f"/v1/agents/{agent}/erase", {"actor": "test"})[0] == 200
        publish(nc.url, [ConversationMessage(agent_id=agent, message_id=f"late-{i}",
                                             text="I moved to Lima.") for i in range(3)])
        wait_for(lambda: serve.log_path.read_text().count("its agent was erased") >= 3, 60,
                 "the late turns dropped")
        code, _ = serve.terminate(timeout=60)
    finally:
        serve.kill()
        nc.stop()
    log = serve.log_path.read_text(errors="replace")
    assert code == 0 and "Traceback" not in log, serve.log_tail(60)
