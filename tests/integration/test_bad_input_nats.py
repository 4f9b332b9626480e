"""Bad NATS input is a reply or a dead letter, never silence (issue 10, item 4): real NATS
JetStream and PostgreSQL; the LLM is the scripted test double of ``test_ingest``."""

from __future__ import annotations

import base64
import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import nats
import pytest
from test_ingest import (
    Collector,
    _dead_letters,
    _publish,
    _publish_raw,
    run_async,
    start_ingest,
    wait_until,
)
from test_write_pipeline import extraction_json, fact, scripted_extractor

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.nats.ingest.faststream_app import (
    QuietFetchTimeouts,
    build_ingest_app,
)
from engramdb.services.entrypoints.nats.retrieve import create_retrieve_broker, retrieve_subject
from engramdb.services.memory.event_log import EventLog
from engramdb.services.memory.facade import Memory
from engramdb.services.write.messages import ConversationMessage, messages_stream_name
from engramdb.services.write.pipeline import WritePipeline


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def app(es_env: dict[str, str]) -> Iterator[EventLog]:
    application = EventLog(es_env)
    yield application
    application.close()


# ----- retrieve: every request gets a reply ------------------------------------------------------


async def _ask_all(nats_url: str, memory: Memory, subject: str, payloads: list[bytes]) -> list[dict[str, Any]]:
    broker = create_retrieve_broker(memory, nats_url, subject)
    await broker.start()
    nc = await nats.connect(nats_url)
    try:
        return [json.loads((await nc.request(subject, p, timeout=10)).data) for p in payloads]
    finally:
        await nc.close()
        await broker.stop()


def test_every_retrieve_request_gets_a_reply(fresh_schema: Any, nats_url: str, prefix: str, agent_id: str) -> None:
    _schema, env = fresh_schema("badnats")
    payloads = [
        b"[" * 100_000 + b"]" * 100_000,  # RecursionError in the JSON parser before
        b'{"agent_id": "a", "query": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b"\xff\xfe not utf-8",
        b"",
        b"null",
        b'{"agent_id": "a", "query": "\\ud800"}',
        json.dumps({"agent_id": agent_id, "query": "q", "as_of": "9999-12-31T23:59:59-14:00"}).encode(),
        json.dumps({"agent_id": agent_id, "query": "q", "config_overrides": {"candidate_pool": 5000}}).encode(),
        json.dumps({"agent_id": agent_id, "query": "where?"}).encode(),
    ]
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as memory:
        subject = retrieve_subject(prefix)  # the prefix is honoured (ENGRAMDB_SUBJECT_PREFIX)
        replies = run_async(_ask_all(nats_url, memory, subject, payloads))
    assert [r.get("error_type") for r in replies[:-1]] == ["validation"] * (len(payloads) - 1), replies
    assert "nested too deeply" in replies[0]["error"] and "as_of" in replies[6]["error"]
    assert "candidate_pool" in replies[7]["error"]
    assert replies[-1]["result"]["agent_id"] == agent_id


# ----- ingest: every poison message is dead-lettered ---------------------------------------------


def test_oversize_poison_is_dead_lettered_by_reference(
    app: EventLog, nats_url: str, prefix: str, agent_id: str
) -> None:
    extractor, _ = scripted_extractor({})
    runner = start_ingest(nats_url, WritePipeline(app, extractor), prefix, Collector(), max_deliver=2, nack_delay=0.05)
    big = b'{"agent_id": "' + agent_id.encode() + b'", "text": "' + b"\x01" * 700_000 + b'"}'  # ~4.2 MB as an inline letter
    small = b"{not json"
    try:
        run_async(_publish_raw(nats_url, prefix, agent_id, [big, small]))
        wait_until(lambda: len(run_async(_dead_letters(nats_url, prefix))) == 2, what="two dead letters")
    finally:
        runner.stop()
    (_, by_ref), (_, inline) = run_async(_dead_letters(nats_url, prefix))
    assert by_ref["by_reference"] is True and by_ref["payload_b64"] is None and by_ref["payload_bytes"] == len(big)
    assert by_ref["stream"] == messages_stream_name(prefix) and by_ref["payload_preview"].startswith('{"agent_id"')
    assert "far above the message limits" in by_ref["reason"]

    async def original() -> bytes:  # the reference resolves to the original payload
        nc = await nats.connect(nats_url)
        try:
            return bytes((await nc.jetstream().get_msg(by_ref["stream"], by_ref["stream_seq"])).data)
        finally:
            await nc.close()

    assert run_async(original()) == big
    assert inline["by_reference"] is False and base64.b64decode(inline["payload_b64"]) == small


def test_message_id_conflict_and_wrong_subject_are_dead_lettered(
    app: EventLog, nats_url: str, prefix: str, agent_id: str
) -> None:
    first = ConversationMessage(agent_id=agent_id, message_id="m-1", speaker="Ana", text="I live in Recife.")
    extractor, _ = scripted_extractor({first.text: extraction_json(fact("Ana lives in Recife"))})
    collector = Collector()
    runner = start_ingest(nats_url, WritePipeline(app, extractor), prefix, collector)
    other_agent = f"agent-{uuid.uuid4().hex}"
    try:
        run_async(_publish(nats_url, prefix, [first]))
        wait_until(lambda: len(collector.results) == 1, what="the first message")
        changed = first.model_copy(update={"text": "I live in Porto."})
        run_async(_publish_raw(nats_url, prefix, agent_id, [changed.to_json_bytes()]))  # no de-dup header
        stray = ConversationMessage(agent_id=other_agent, message_id="m-9", text="I live in Lisbon.")
        run_async(_publish_raw(nats_url, prefix, agent_id, [stray.to_json_bytes()]))  # another agent's subject
        wait_until(lambda: len(run_async(_dead_letters(nats_url, prefix))) == 2, what="two dead letters")
    finally:
        runner.stop()
    letters = run_async(_dead_letters(nats_url, prefix))  # settled concurrently: any order
    (h1, conflict), (_, stray_letter) = sorted(letters, key=lambda hb: "does not match" in hb[1]["reason"])
    assert conflict["reason"].startswith("message id conflict") and h1["Engramdb-Dead-Reason"].startswith("message id conflict")
    assert conflict["agent_id"] == agent_id and json.loads(conflict["payload"])["text"] == "I live in Porto."
    assert "does not match agent_id" in stray_letter["reason"]
    assert app.message_record(agent_id, "m-1").text == "I live in Recife."  # the original stays
    assert app.message_record(other_agent, "m-9") is None


def test_idle_fetch_timeouts_are_not_logged_as_errors(nats_url: str, prefix: str) -> None:
    """nats-py's fetch raises the builtin TimeoutError that FastStream's loop does not
    suppress; its supervisor restarts the loop and logged a traceback every ~20 s."""
    logger = logging.getLogger(f"test.quiet.{prefix}")
    build_ingest_app(nats_url, pipeline_factory=lambda: None, prefix=prefix, logger=logger)  # type: ignore[arg-type,return-value]
    assert any(isinstance(f, QuietFetchTimeouts) for f in logger.filters)
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger.addHandler(Keep())
    logger.setLevel(logging.INFO)
    logger.propagate = False
    for exc in (TimeoutError(), RuntimeError("database down")):
        logger.info("callback for Task-9 is being executed...")
        try:
            raise exc
        except Exception as caught:  # noqa: BLE001
            logger.error("Task-9 raised an exception, retrying...\nIf this behavior", exc_info=caught)
    assert [r.exc_info[1] for r in records if r.exc_info] == [records[0].exc_info[1]]
    assert isinstance(records[0].exc_info[1], RuntimeError) and len(records) == 1


def test_subjects_outside_the_agent_scheme_are_refused_not_kept(
    app: EventLog, nats_url: str, prefix: str, agent_id: str
) -> None:
    """ADR-0051 (issue 28): the stream captures ``<prefix>.messages.<token>`` only. A turn on
    a deeper subject was stored and never consumed, and one on ``messages.<p>.<token>``
    skipped the partition mapping; JetStream now refuses both (no stream answers), so the
    publisher gets an error instead of a turn that silently goes nowhere."""
    from nats.js.errors import NoStreamResponseError

    from engramdb.services.write.messages import agent_token

    good = ConversationMessage(agent_id=agent_id, message_id="m-1", speaker="Ana", text="I live in Recife.")
    extractor, _ = scripted_extractor({good.text: extraction_json(fact("Ana lives in Recife"))})
    collector = Collector()
    runner = start_ingest(nats_url, WritePipeline(app, extractor), prefix, collector)
    try:
        run_async(_publish(nats_url, prefix, [good]))
        wait_until(lambda: len(collector.results) == 1, what="the well-addressed turn")

        async def publish_on(subject: str) -> None:
            nc = await nats.connect(nats_url)
            try:
                await nc.jetstream().publish(subject, good.to_json_bytes(), timeout=2)
            finally:
                await nc.close()

        for subject in (f"{prefix}.messages.x.y.z", f"{prefix}.messages.3.{agent_token(agent_id)}"):
            with pytest.raises(NoStreamResponseError):
                run_async(publish_on(subject))
    finally:
        runner.stop()
    assert app.message_record(agent_id, "m-1") is not None
