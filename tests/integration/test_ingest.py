"""NATS ingest against a REAL NATS JetStream and a REAL PostgreSQL.

Each test uses its own subject prefix (so its own streams and durable consumer) and its own
agent ids. The LLM is the scripted TEST DOUBLE (``ScriptedLLM`` keyed by message text,
through the real ``LLMExtractor``). Facts are checked in the event log, and — when the
projection runner is available — in the ``mem_facts`` read model.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import nats
import pytest
from test_write_pipeline import active_fact_texts, extraction_json, fact, scripted_extractor, topics

from engramdb.services.entrypoints.nats.ingest import IngestThread, build_ingest_app
from engramdb.services.entrypoints.nats.publisher import (
    MessagePublisher,
    publish_cli,
    publish_message,
)
from engramdb.services.memory.event_log import EventLog
from engramdb.services.write.messages import (
    ConversationMessage,
    deadletter_stream_name,
    message_subject,
    messages_stream_name,
)
from engramdb.services.write.pipeline import WritePipeline, WriteResult
from engramdb.services.write.pre_retrieval import PreRetrieval


def wait_until(predicate: Callable[[], bool], timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


class Collector:
    def __init__(self) -> None:
        self.results: list[WriteResult] = []
        self.lock = threading.Lock()

    def __call__(self, result: WriteResult) -> None:
        with self.lock:
            self.results.append(result)


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def app(es_env: dict[str, str]) -> Iterator[EventLog]:
    application = EventLog(es_env)
    yield application
    application.close()


def run_async(coro: Any) -> Any:
    return asyncio.run(coro)


async def _publish(nats_url: str, prefix: str, messages: list[ConversationMessage]) -> None:
    async with MessagePublisher(nats_url, prefix) as pub:
        for m in messages:
            await pub.publish(m)


async def _publish_raw(nats_url: str, prefix: str, agent: str, payloads: list[bytes], headers: dict[str, str] | None = None) -> None:
    async with MessagePublisher(nats_url, prefix) as pub:
        for p in payloads:
            await pub.publish_raw(agent, p, headers)


async def _dead_letters(nats_url: str, prefix: str) -> list[tuple[dict[str, str], dict[str, Any]]]:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        try:
            info = await js.stream_info(deadletter_stream_name(prefix))
        except Exception:  # noqa: BLE001 — no stream yet: no dead letters
            return []
        out = []
        if not info.state.messages:
            return out
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            raw = await js.get_msg(deadletter_stream_name(prefix), seq)
            out.append((dict(raw.headers or {}), json.loads(raw.data)))
        return out
    finally:
        await nc.close()


def start_ingest(nats_url: str, pipeline: Any, prefix: str, collector: Collector, **kw: Any) -> IngestThread:
    ingest_app, _broker = build_ingest_app(nats_url, pipeline, prefix=prefix, on_result=collector, **kw)
    return IngestThread(ingest_app).start()


# ----- tests -----------------------------------------------------------------------------------


def test_published_message_becomes_events_and_facts(
    fresh_schema: Any, nats_url: str, pg_url: str, prefix: str, agent_id: str
) -> None:
    """publish → ingest → events → projection → the next message's extraction sees the fact."""
    if importlib.util.find_spec("engramdb.projections.runner") is None:
        pytest.skip("projections.runner not available")
    import psycopg

    from engramdb.infra.providers.scripted import HashEmbedder
    from engramdb.projections.runner import ProjectionSet

    schema, es_env = fresh_schema("ingest")  # own event store: the projectors replay only this test
    app = EventLog(es_env)
    first, second = "I adopted a cat named Mia.", "Mia is sick today."
    extractor, llm = scripted_extractor(
        {
            first: extraction_json(fact("Ana adopted a cat named Mia", mentions=["Mia"]),
                                   entities=[("Ana", "person"), ("Mia", "pet")]),
            second: extraction_json(fact("Mia is sick", entity="Mia"), entities=[("Mia", "pet")]),
        }
    )
    pre = PreRetrieval(pg_url, schema=schema)
    pipeline = WritePipeline(app, extractor, pre_retrieval=pre)
    collector = Collector()
    projections = ProjectionSet.start(EventLog, es_env, HashEmbedder())
    runner = start_ingest(nats_url, pipeline, prefix, collector)
    try:
        report = publish_cli(nats_url, agent_id, first, message_id="m-1", speaker="Ana", prefix=prefix)
        assert "m-1" in report and messages_stream_name(prefix) in report
        wait_until(lambda: len(collector.results) == 1, what="the first message to be processed")
        projections.wait(collector.results[0].position, timeout=30)
        with psycopg.connect(pg_url, options=f"-c search_path={schema},public") as conn:
            rows = conn.execute(
                "SELECT fact_id, fact_text FROM mem_facts WHERE agent_id = %s AND valid_to IS NULL", (agent_id,)
            ).fetchall()
        assert [r[1] for r in rows] == ["Ana adopted a cat named Mia"]

        publish_cli(nats_url, agent_id, second, message_id="m-2", speaker="Ana", prefix=prefix)
        wait_until(lambda: len(collector.results) == 2, what="the second message to be processed")
    finally:
        runner.stop()
        projections.stop()
        pre.close()
    assert [r.llm_calls for r in collector.results] == [1, 1] and len(llm.calls) == 2
    prompt = llm.calls[1].messages[-1]["content"]
    assert rows[0][0] in prompt and "pet:mia" in prompt  # pre-retrieval read the projections
    assert active_fact_texts(app, agent_id) == ["Ana adopted a cat named Mia", "Mia is sick"]
    app.close()


def test_same_message_three_times_gives_one_set_of_decisions(
    app: EventLog, nats_url: str, prefix: str, agent_id: str
) -> None:
    text = "I work at Vertix."
    extractor, llm = scripted_extractor({text: extraction_json(fact("Ana works at Vertix"))})
    collector = Collector()
    runner = start_ingest(nats_url, WritePipeline(app, extractor), prefix, collector)
    message = ConversationMessage(agent_id=agent_id, message_id="dup-1", speaker="Ana", text=text)
    try:
        acks = [publish_message(nats_url, message, prefix=prefix) for _ in range(3)]
        assert [bool(a.duplicate) for a in acks] == [False, True, True]  # server-side de-dup (Nats-Msg-Id)
        # the same message again WITHOUT the de-dup header: the pipeline's record catches it
        run_async(_publish_raw(nats_url, prefix, agent_id, [message.to_json_bytes()] * 2))
        wait_until(lambda: len(collector.results) == 3, what="three deliveries")
    finally:
        runner.stop()
    assert [r.duplicate for r in collector.results] == [False, True, True]
    assert len(llm.calls) == 1
    assert topics(app, agent_id).count("FactAdded") == 1


def test_poison_messages_go_to_dead_letter_and_stream_keeps_flowing(
    app: EventLog, nats_url: str, prefix: str, agent_id: str
) -> None:
    good = "I like hiking."
    extractor, _ = scripted_extractor({good: extraction_json(fact("Ana likes hiking"))})
    collector = Collector()
    runner = start_ingest(nats_url, WritePipeline(app, extractor), prefix, collector)
    poison = [
        b"{not json",
        json.dumps({"agent_id": agent_id, "text": 42}).encode(),
        json.dumps({"agent_id": agent_id, "text": "nul \x00 byte"}).encode(),
        b"\xff\xfe binary",
    ]
    try:
        run_async(_publish_raw(nats_url, prefix, agent_id, poison, {"content-type": "application/json"}))
        run_async(_publish(nats_url, prefix, [ConversationMessage(agent_id=agent_id, message_id="ok", speaker="Ana", text=good)]))
        wait_until(lambda: len(collector.results) == 1, what="the valid message after the poison")
        wait_until(lambda: len(run_async(_dead_letters(nats_url, prefix))) == 4, what="dead letters")
    finally:
        runner.stop()
    letters = run_async(_dead_letters(nats_url, prefix))
    reasons = [body["reason"] for _headers, body in letters]
    assert "not JSON" in reasons[0]
    assert "text" in reasons[1] and "string" in reasons[1]
    assert "NUL" in reasons[2]
    assert "not UTF-8" in reasons[3]
    for (headers, body), original in zip(letters, poison, strict=True):
        assert headers["Engramdb-Dead-Reason"] and body["stage"] == "validation"
        assert body["subject"] == message_subject(agent_id, prefix)
        import base64

        assert base64.b64decode(body["payload_b64"]) == original  # original payload kept
    assert active_fact_texts(app, agent_id) == ["Ana likes hiking"]


class FlakyPipeline:
    """Wraps a real pipeline; raises a storage-like error for scripted message ids."""

    def __init__(self, inner: WritePipeline, failures: dict[str, int]) -> None:
        self.inner = inner
        self.failures = dict(failures)
        self.attempts: dict[str, int] = {}

    def write(self, message: ConversationMessage) -> WriteResult:
        self.attempts[message.message_id] = self.attempts.get(message.message_id, 0) + 1
        if self.failures.get(message.message_id, 0) > 0:
            self.failures[message.message_id] -= 1
            raise ConnectionError("database unavailable (scripted)")
        return self.inner.write(message)


def test_transient_failure_is_retried_then_dead_lettered(
    app: EventLog, nats_url: str, prefix: str, agent_id: str
) -> None:
    texts = {"flaky": "I play the guitar.", "doomed": "I play the drums.", "after": "I play the flute."}
    extractor, _ = scripted_extractor({t: extraction_json(fact(f"Ana plays {t.split()[-1][:-1]}")) for t in texts.values()})
    flaky = FlakyPipeline(WritePipeline(app, extractor), {"flaky": 1, "doomed": 99})
    collector = Collector()
    # published before the consumer starts, so its first fetch holds all three, in order
    run_async(_publish(nats_url, prefix, [
        ConversationMessage(agent_id=agent_id, message_id=mid, speaker="Ana", text=t) for mid, t in texts.items()
    ]))
    runner = start_ingest(nats_url, flaky, prefix, collector, max_deliver=3, nack_delay=0.05)
    try:
        wait_until(lambda: len(collector.results) == 2, what="two successful writes")
        wait_until(lambda: len(run_async(_dead_letters(nats_url, prefix))) == 1, what="one dead letter")
    finally:
        runner.stop()
    # "doomed" was first nacked unattempted (queued behind the failed "flaky", to keep the
    # order); that delivery counts toward max_deliver too
    assert flaky.attempts["flaky"] == 2 and flaky.attempts["doomed"] == 2
    # per-agent order: "after" never overtook "flaky"
    assert [r.message_id for r in collector.results] == ["flaky", "after"]
    (headers, body), = run_async(_dead_letters(nats_url, prefix))
    assert body["stage"] == "processing" and body["deliveries"] == 3 and "database unavailable" in body["reason"]
    assert app.message_record(agent_id, "doomed") is None  # never stored: the failure was before the record
    assert active_fact_texts(app, agent_id) == ["Ana plays flute", "Ana plays guitar"]


def test_per_agent_order_is_kept_while_agents_run_in_parallel(
    app: EventLog, nats_url: str, prefix: str
) -> None:
    agents = [f"agent-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    messages = [
        ConversationMessage(agent_id=a, message_id=f"{a}-{i:02d}", speaker="Ana", text=f"note {i} for {a}")
        for i in range(15) for a in agents
    ]
    extractor, _ = scripted_extractor({m.text: extraction_json(fact(f"Ana noted {m.message_id}")) for m in messages})
    collector = Collector()
    runner = start_ingest(nats_url, WritePipeline(app, extractor), prefix, collector, batch_size=16)
    try:
        run_async(_publish(nats_url, prefix, messages))
        wait_until(lambda: len(collector.results) == len(messages), what="all messages")
    finally:
        runner.stop()
    for a in agents:
        seen = [r.message_id for r in collector.results if r.agent_id == a]
        assert seen == [f"{a}-{i:02d}" for i in range(15)]
        positions = [r.position for r in collector.results if r.agent_id == a]
        assert positions == sorted(positions)  # the log holds them in publication order too
