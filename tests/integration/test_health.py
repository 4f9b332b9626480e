"""``Memory.health()`` and ``/readyz`` against the real servers: healthy, lagging, and with
the database or the broker gone (a PostgreSQL of our own, stopped under a live ``Memory``)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from engramdb.infra.embedded_base import pick_port
from engramdb.infra.embedded_postgres import ensure_postgres
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.memory.facade import Memory


@pytest.fixture
def memory(fresh_schema) -> Iterator[Memory]:
    _schema, env = fresh_schema("health")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield mem


async def _readyz(memory: object) -> httpx.Response:
    app = create_app(memory)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        return await c.get("/readyz")


async def test_healthy_memory_is_ready(memory: Memory, agent_id: str, nats_url: str) -> None:
    written = memory.write(agent_id, "I live in Recife.", speaker="Ana")
    memory.wait_for_projections(written.position)
    memory.nats_url = nats_url

    report = memory.health()
    assert report.ok and report.reasons == []
    assert report.database.status == "up" and report.nats.status == "up"
    assert report.head == written.position
    assert set(report.projections) == {"conversation", "memory"}
    assert all(p.lag == 0 and p.running for p in report.projections.values())

    response = await _readyz(memory)
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and body["checks"]["database"]["status"] == "up"


def test_nats_is_not_configured_in_process(memory: Memory) -> None:
    report = memory.health()
    assert report.ok and report.nats.status == "not configured"


async def test_unreachable_nats_is_not_ready(memory: Memory) -> None:
    memory.nats_url = f"nats://127.0.0.1:{pick_port()}"  # a free port: nothing listens
    report = memory.health(timeout=0.5)
    assert not report.ok and report.nats.status == "down"
    assert any(r.startswith("nats down") for r in report.reasons)
    assert (await _readyz(memory)).status_code == 503


async def test_lagging_projections_are_reported(fresh_schema, agent_id: str) -> None:
    _schema, env = fresh_schema("lag")
    with Memory.open(
        env=env, embedder=HashEmbedder(384), llm=None, quiet=True, start_projectors=False
    ) as mem:
        written = mem.write(agent_id, "I work at Vertix.", speaker="Ana")
        report = mem.health()  # nobody projects: the whole log is lag, but under the threshold
        assert report.ok and report.head == written.position
        assert all(
            p.lag == written.position and p.running is None for p in report.projections.values()
        )

        strict = mem.health(max_lag=0)
        assert not strict.ok
        assert any("lags" in r for r in strict.reasons)

        response = await _readyz(_Strict(mem))
        assert response.status_code == 503
        assert response.json()["checks"]["projections"]["memory"]["lag"] > 0


class _Strict:
    """The same memory, readiness judged with no lag allowed."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory

    def health(self) -> object:
        return self.memory.health(max_lag=0)


async def test_unreachable_database_is_not_ready(agent_id: str) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="engramdb-health-", dir="/tmp"))
    handle = ensure_postgres(data_dir, fast_unsafe=True)
    try:
        mem = Memory.open(
            database_url=handle.url,
            embedder=HashEmbedder(384),
            llm=None,
            quiet=True,
            start_projectors=False,
        )
    except BaseException:
        handle.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
        raise
    try:
        assert mem.health().database.status == "up"
        handle.stop()  # the only client: the server really stops
        report = mem.health(timeout=1.0)
        assert not report.ok and report.database.status == "down"
        assert report.reasons[0].startswith("database down: ")
        assert report.head is None and report.projections == {}
        response = await _readyz(mem)
        assert response.status_code == 503
        assert response.json()["checks"]["database"]["status"] == "down"
    finally:
        mem.close()
        shutil.rmtree(data_dir, ignore_errors=True)


async def test_the_lag_threshold_is_a_setting(fresh_schema, agent_id: str) -> None:
    from engramdb.infra.settings import Settings

    _schema, env = fresh_schema("lagset")
    with Memory.open(
        Settings(ready_max_lag=0), env=env, embedder=HashEmbedder(384), llm=None, quiet=True,
        start_projectors=False,
    ) as mem:
        assert mem.health().ok  # an empty log: nothing to lag behind
        mem.write(agent_id, "I work at Vertix.", speaker="Ana")
        report = mem.health()
        assert not report.ok and any("(max 0)" in r for r in report.reasons)
        assert (await _readyz(mem)).status_code == 503
        assert mem.health(max_lag=10_000).ok  # an explicit threshold wins


def _status(monkeypatch, *args: str, **env: str):  # noqa: ANN202 - typer's Result
    from typer.testing import CliRunner

    from engramdb.services.entrypoints.cli.main import app

    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("ENGRAMDB_EMBEDDING_MODEL", "hash-bow-384")
    monkeypatch.delenv("ENGRAMDB_LLM_API_KEY", raising=False)
    monkeypatch.delenv("ENGRAMDB_LLM_BASE_URL", raising=False)
    return CliRunner().invoke(app, ["status", *args])


def test_status_command(monkeypatch, fresh_schema, pg_url: str, nats_url: str, agent_id: str) -> None:
    import json

    schema, env = fresh_schema("status")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        written = mem.write(agent_id, "I live in Recife.", speaker="Ana")
        mem.wait_for_projections(written.position)
    settings = {
        "ENGRAMDB_DATABASE_URL": pg_url, "ENGRAMDB_NATS_URL": nats_url, "ENGRAMDB_DB_SCHEMA": schema,
    }
    healthy = _status(monkeypatch, **settings)
    assert healthy.exit_code == 0, healthy.output
    assert healthy.output.startswith("status: ok\n")
    assert "nats: up" in healthy.output and "projection memory: position" in healthy.output

    as_json = _status(monkeypatch, "--json", **settings)
    assert as_json.exit_code == 0, as_json.output
    report = json.loads(as_json.output)
    assert report["ok"] and report["head"] == written.position
    assert report["projections"]["conversation"]["lag"] == 0

    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True,
                     start_projectors=False) as mem:
        mem.write(agent_id, "I work at Vertix.", speaker="Ana")  # nobody projects it
    lagging = _status(monkeypatch, "--max-lag", "0", **settings)
    assert lagging.exit_code == 1
    assert "status: UNHEALTHY" in lagging.output and "lags" in lagging.output

    down = _status(monkeypatch, **{**settings,
                   "ENGRAMDB_DATABASE_URL": f"postgresql://u:p@127.0.0.1:{pick_port()}/db"})
    assert down.exit_code == 1
    assert "database: down" in down.output and "! database down: " in down.output


def test_status_does_not_start_embedded_servers(monkeypatch, tmp_path, fresh_schema, pg_url) -> None:
    monkeypatch.delenv("ENGRAMDB_DATABASE_URL", raising=False)
    monkeypatch.delenv("ENGRAMDB_NATS_URL", raising=False)
    nothing = _status(monkeypatch, ENGRAMDB_DATA_DIR=str(tmp_path))
    assert nothing.exit_code == 1
    assert "the embedded PostgreSQL in" in nothing.output and "is not running" in nothing.output
    assert not (tmp_path / "pg").exists()  # it did not start one

    schema, _env = fresh_schema("status")
    no_nats = _status(monkeypatch, ENGRAMDB_DATA_DIR=str(tmp_path), ENGRAMDB_DATABASE_URL=pg_url,
                      ENGRAMDB_DB_SCHEMA=schema)
    assert no_nats.exit_code == 1
    assert "database: up" in no_nats.output
    assert "! nats down: the embedded NATS in" in no_nats.output


def test_status_shows_each_operations_model_and_host_never_the_key(
    monkeypatch, fresh_schema, pg_url: str, nats_url: str
) -> None:
    """ADR-0052: per operation the model and the endpoint's host — in text and ``--json``."""
    import json

    schema, _env = fresh_schema("status_llm")
    settings = {
        "ENGRAMDB_DATABASE_URL": pg_url, "ENGRAMDB_NATS_URL": nats_url, "ENGRAMDB_DB_SCHEMA": schema,
    }
    plain = _status(monkeypatch, **settings)  # no LLM at all
    assert plain.exit_code == 0, plain.output
    assert "llm (every operation): none (offline)" in plain.output

    llm_env = {
        **settings,
        "ENGRAMDB_LLM_EXTRACTION_BASE_URL": "http://llm.internal:8000/v1",
        "ENGRAMDB_LLM_EXTRACTION_API_KEY": "sk-secret-extraction",
        "ENGRAMDB_LLM_EXTRACTION_MODEL": "small",
        "ENGRAMDB_LLM_RERANK_BASE_URL": "https://user:pw@rerank.example.com/v1",
        "ENGRAMDB_LLM_RERANK_API_KEY": "sk-secret-rerank",
        "ENGRAMDB_LLM_RERANK_MODEL": "big",
    }
    text = _status(monkeypatch, **llm_env)
    assert text.exit_code == 0, text.output
    assert "llm extraction: openai:small @ llm.internal:8000  (own: model, base_url, api_key)" \
        in text.output
    assert "llm rerank: openai:big @ rerank.example.com  (own: model, base_url, api_key)" in text.output
    assert "llm profiles: none (offline)" in text.output  # no global endpoint: offline
    as_json = _status(monkeypatch, "--json", **llm_env)
    assert as_json.exit_code == 0, as_json.output
    ops = json.loads(as_json.output)["llm_operations"]
    assert ops["extraction"] == {"model": "openai:small", "endpoint": "llm.internal:8000",
                                 "configured": "own: model, base_url, api_key"}
    assert ops["resolution"]["configured"] == "off"
    for output in (text.output, as_json.output):
        assert "sk-secret" not in output and "pw@" not in output and "/v1" not in output

    for key in set(llm_env) - set(settings):
        monkeypatch.delenv(key)
    bad = _status(monkeypatch, **{**settings, "ENGRAMDB_LLM_RERANK_MODEL": "big"})
    assert bad.exit_code == 2
    assert "ENGRAMDB_LLM_RERANK_MODEL set, but rerank has no LLM endpoint" in bad.output
