"""LLM outages lose nothing (issue 10, ADR-0014), against the real PostgreSQL and NATS.

The LLM is ``tests/support/fake_openai_server.py`` (real HTTP through the real ``openai`` client),
switched off and on while the test runs: ``refuse()`` (connection refused) or ``fail_with(503)``.
Before this change an outage during ingest acked the message with an empty extraction: no
retry, no record that it still needed extracting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from test_ingest import Collector, _publish, wait_until
from test_rebuild import dump
from test_write_pipeline import active_fact_texts, extraction_json, fact, message_key, msg

from engramdb.infra.providers.openai_llm import OpenAILLM
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.nats.ingest import IngestThread, build_ingest_app
from engramdb.services.extraction import LLMExtractor
from engramdb.services.management.commands import dry_run_write
from engramdb.services.management.retrier import ExtractionRetrier
from engramdb.services.memory.event_log import EventLog
from engramdb.services.memory.facade import Memory
from engramdb.services.write.pipeline import WritePipeline
from tests.support.fake_openai_server import FakeOpenAI, run_fake_openai

TEXTS = {
    "I live in Porto.": extraction_json(fact("Ana lives in Porto", attribute_key="residence")),
    "I play the cello.": extraction_json(fact("Ana plays the cello")),
    "I work at Globex.": extraction_json(fact("Ana works at Globex", attribute_key="employer")),
    "I moved to Lisbon.": extraction_json(fact("Ana lives in Lisbon", attribute_key="residence")),
}


def script(body: dict[str, Any]) -> str:
    key = message_key(body.get("messages", []))
    if key == "This answer is not JSON.":
        return "{not json"
    return TEXTS[key]  # KeyError -> HTTP 400 (a bad request, not an outage)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with run_fake_openai(script) as server:
        yield server


def fake_llm(fake: FakeOpenAI) -> OpenAILLM:
    # one retry inside the provider, no backoff sleeps: the outage tests stay fast
    return OpenAILLM("fake-model", base_url=fake, max_retries=1, backoff_base=0.0, timeout=5.0)


@pytest.fixture
def memory(fresh_schema: Any, fake: FakeOpenAI) -> Iterator[Memory]:
    _schema, env = fresh_schema("llm")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=fake_llm(fake), quiet=True) as mem:
        yield mem


def fact_texts(memory: Memory, agent_id: str) -> list[str]:
    memory.wait_for_projections()
    with memory.pool.connection() as conn:
        rows = conn.execute(
            "SELECT fact_text FROM mem_facts WHERE agent_id = %s AND status = 'active' ORDER BY 1", (agent_id,)
        ).fetchall()
    return [r[0] for r in rows]


def pending_now(memory: Memory, agent_id: str | None = None) -> int:
    memory.wait_for_projections()
    return memory.pending_count(agent_id)


# ----- which failures are an outage ---------------------------------------------------------


@pytest.mark.parametrize("outage", ["refuse", 503, 500, 429])
def test_outage_defers_but_bad_answers_still_fail_safe(
    es_env: dict[str, str], agent_id: str, fake: FakeOpenAI, outage: Any
) -> None:
    app = EventLog(es_env)
    try:
        pipeline = WritePipeline(app, LLMExtractor(fake_llm(fake), timeout_sec=5.0))
        fake.refuse() if outage == "refuse" else fake.fail_with(outage)
        assert dry_run_write(pipeline, msg(agent_id, "I live in Porto.", "m1")).extraction_pending
        down = pipeline.write(msg(agent_id, "I live in Porto.", "m1"))
        assert down.extraction_pending and down.decisions == [] and down.extraction_error
        record = app.message_record(agent_id, "m1")
        assert record is not None and record.extraction_pending and not record.processed
        fake.restore()
        # invalid output and a rejected request are answers, not outages: processed, as before
        for text, mid in (("This answer is not JSON.", "m2"), ("Nobody scripted this.", "m3")):
            result = pipeline.write(msg(agent_id, text, mid))
            assert not result.extraction_pending and result.extraction_error
            assert app.message_record(agent_id, mid).processed  # type: ignore[union-attr]
        # ... and the first write after the outage extracted the deferred m1 before m2 (order)
        assert active_fact_texts(app, agent_id) == ["Ana lives in Porto"]
        events = [type(e).__name__ for e in app.events.get(record.id)]
        assert events == ["Recorded", "ExtractionDeferred", "Processed"]
        m1_done = list(app.events.get(record.id))[-1].timestamp
        m2 = app.message_record(agent_id, "m2")
        assert m2 is not None and m1_done < list(app.events.get(m2.id))[-1].timestamp
        assert pipeline.write(msg(agent_id, "I live in Porto.", "m1")).duplicate
    finally:
        app.close()


def test_a_later_message_never_overtakes_a_deferred_one(
    es_env: dict[str, str], agent_id: str, fake: FakeOpenAI
) -> None:
    """Without the per-agent catch-up, "I moved to Lisbon" (written after the LLM came back)
    was extracted first and the deferred "I live in Porto" then UPDATEd it: Porto was current."""
    app = EventLog(es_env)
    try:
        pipeline = WritePipeline(app, LLMExtractor(fake_llm(fake), timeout_sec=5.0))
        fake.fail_with(503)
        assert pipeline.write(msg(agent_id, "I live in Porto.", "m1")).extraction_pending
        calls = fake.chat_requests()
        blocked = pipeline.write(msg(agent_id, "I moved to Lisbon.", "m2"))
        # m1 is tried first (one attempt = 2 requests with max_retries=1); m2 asks nothing
        assert blocked.extraction_pending and "earlier message 'm1'" in (blocked.extraction_error or "")
        assert fake.chat_requests() == calls + 2
        fake.restore()
        pipeline.write(msg(agent_id, "I work at Globex.", "m3"))
        assert active_fact_texts(app, agent_id) == ["Ana lives in Lisbon", "Ana works at Globex"]
        assert pipeline.deferred.pending(agent_id) == []
    finally:
        app.close()


# ----- the synchronous write path (Python API / HTTP) -------------------------------------


async def _http_write(memory: Memory, body: dict[str, Any]) -> dict[str, Any]:
    import httpx

    from engramdb.services.entrypoints.http.api import create_app

    transport = httpx.ASGITransport(app=create_app(memory))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.post("/v1/messages", json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def test_sync_write_during_outage_is_pending_then_reprocessed_in_order(
    memory: Memory, fake: FakeOpenAI, agent_id: str, pg_url: str
) -> None:
    fake.refuse()
    first = memory.write(agent_id, "I live in Porto.", speaker="Ana", message_id="m1")
    second = asyncio.run(_http_write(memory, {  # the HTTP API says so too
        "agent_id": agent_id, "text": "I play the cello.", "speaker": "Ana", "message_id": "m2"}))
    assert first.extraction_pending and second["extraction_pending"] is True
    assert "Connection" in (first.extraction_error or "")
    assert memory.app.message_record(agent_id, "m1") is not None  # the message is kept
    assert pending_now(memory, agent_id) == 2 and pending_now(memory) >= 2
    # what `engramdb status` / /readyz and /metrics show
    assert memory.health().extraction_pending == 2
    assert "engramdb_extraction_pending 2.0" in memory.metrics.exposition().decode()
    listed = memory.pending_extractions(agent_id)
    assert [p.message_id for p in listed] == ["m1", "m2"]
    assert listed[0].attempts == 1 and listed[0].deferrals == 1
    assert fact_texts(memory, agent_id) == []

    still_down = memory.reprocess_pending(agent_id)  # the probe fails: nothing recorded
    assert still_down.extracted == [] and still_down.still_pending == [f"{agent_id}/m1"]
    assert pending_now(memory, agent_id) == 2

    fake.restore()
    report = memory.reprocess_pending(agent_id)
    assert report.extracted == [f"{agent_id}/m1", f"{agent_id}/m2"] and not report.still_pending
    assert pending_now(memory, agent_id) == 0
    assert fact_texts(memory, agent_id) == ["Ana lives in Porto", "Ana plays the cello"]

    # rebuild == incremental, and replaying the log asks the LLM nothing
    schema = memory.schema
    before, calls = dump(pg_url, schema), fake.chat_requests()
    memory.rebuild()
    assert dump(pg_url, schema) == before and fake.chat_requests() == calls


# ----- NATS ingest + the retrier of `serve` ----------------------------------------------


def test_ingest_outage_nacks_then_defers_and_the_retrier_extracts(
    memory: Memory, fake: FakeOpenAI, nats_url: str, agent_id: str, pg_url: str
) -> None:
    prefix = f"t{agent_id[-10:]}"
    collector = Collector()
    ingest_app, _ = build_ingest_app(
        nats_url, memory.pipeline, prefix=prefix, on_result=collector,
        nack_delay=0.05, extraction_attempts=3, fetch_timeout=0.5,
    )
    service = ingest_app.ingest_service  # type: ignore[attr-defined]
    fake.fail_with(503)
    thread = IngestThread(ingest_app).start()
    try:
        asyncio.run(_publish(nats_url, prefix, [
            msg(agent_id, "I live in Porto.", "n1"), msg(agent_id, "I work at Globex.", "n2"),
        ]))
        wait_until(lambda: len(collector.results) == 2, 30, "both messages settled")
    finally:
        thread.stop()
    assert all(r.extraction_pending for r in collector.results)
    assert service.stats["extraction_deferred"] == 2 and service.stats["dead_lettered"] == 0
    assert service.stats["llm_unavailable"] >= 2 and service.stats["nacked"] >= 4  # retried
    for mid in ("n1", "n2"):
        record = memory.app.message_record(agent_id, mid)
        assert record is not None and record.extraction_pending
        deferred = list(memory.app.events.get(record.id))[-1]
        assert deferred.attempts == 3 and "503" in deferred.reason  # the third delivery
    assert pending_now(memory, agent_id) == 2 and fact_texts(memory, agent_id) == []

    retrier = ExtractionRetrier(memory.pipeline, memory.pool, interval_sec=0.1).start()
    try:
        wait_until(lambda: retrier.rounds >= 2, 10, "the retrier probing a down LLM")
        assert pending_now(memory, agent_id) == 2  # still down: still pending, no new events
        assert len(list(memory.app.events.get(memory.app.message_record(agent_id, "n1").id))) == 2  # type: ignore[union-attr]
        fake.restore()
        wait_until(lambda: pending_now(memory, agent_id) == 0, 20, "re-extraction")
    finally:
        retrier.stop()
    assert fact_texts(memory, agent_id) == ["Ana lives in Porto", "Ana works at Globex"]

    schema = memory.schema
    before, calls = dump(pg_url, schema), fake.chat_requests()
    memory.rebuild()
    assert dump(pg_url, schema) == before and fake.chat_requests() == calls


# ----- the command line ------------------------------------------------------------------


def test_cli_pending_and_reprocess_failed(
    monkeypatch: pytest.MonkeyPatch, pg_url: str, fresh_schema: Any, fake: FakeOpenAI, agent_id: str
) -> None:
    from typer.testing import CliRunner

    from engramdb.services.entrypoints.cli.main import app as cli

    schema, _env = fresh_schema("cli")
    for key, value in {
        "DATABASE_URL": pg_url, "DB_SCHEMA": schema, "EMBEDDING_MODEL": "hash-bow-384",
        "LLM_BASE_URL": str(fake), "LLM_MODEL": "fake-model", "LLM_MAX_RETRIES": "0",
    }.items():
        monkeypatch.setenv(f"ENGRAMDB_{key}", value)
    fake.refuse()
    with Memory.open(quiet=True) as memory:
        assert memory.write(agent_id, "I live in Porto.", speaker="Ana", message_id="c1").extraction_pending
    runner = CliRunner()
    listed = runner.invoke(cli, ["pending", "--agent", agent_id, "--json"])
    assert listed.exit_code == 0, listed.output
    assert '"message_id":"c1"' in listed.output and "Connection" in listed.output
    down = runner.invoke(cli, ["reprocess", "--agent", agent_id, "--failed"])
    assert down.exit_code == 1 and "LLM still unavailable" in down.output
    assert runner.invoke(cli, ["reprocess"]).exit_code == 2  # needs --agent or --failed
    fake.restore()
    done = runner.invoke(cli, ["reprocess", "--agent", agent_id, "--message", "c1", "--failed"])
    assert done.exit_code == 0 and f'"{agent_id}/c1"' in done.output
    after = runner.invoke(cli, ["pending", "--agent", agent_id])
    assert after.exit_code == 0 and "0 pending extraction(s)" in after.output
