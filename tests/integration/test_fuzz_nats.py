"""Property-based fuzz of the NATS surfaces (hypothesis): random bytes, random JSON and
message-shaped JSON with random field values, sent to the ingest subject and to
``<prefix>.retrieve`` and ``<prefix>.manage.<op>`` on a real NATS JetStream and PostgreSQL (``Memory`` with the offline
extractor). Every retrieve and manage request must get a JSON reply; every ingest message must be either
processed or dead-lettered — never lost, never a hang (issue 10, item 4). Deterministic for CI:
the examples are drawn once, derandomized, then sent."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import nats
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_ingest import Collector, start_ingest

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.nats.manage import register_manage
from engramdb.services.entrypoints.nats.retrieve import create_retrieve_broker, retrieve_subject
from engramdb.services.memory.facade import Memory
from engramdb.services.write.messages import (
    deadletter_stream_name,
    message_subject,
    messages_stream_name,
)

EXAMPLES = 150
AGENT = "fuzz-nats-agent"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
times = st.sampled_from(["2024-05-01T10:00:00Z", "9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00", "yesterday"])
message_like = st.fixed_dictionaries(
    {"agent_id": st.sampled_from([AGENT, "", "other agent", "a" * 300]) | json_values},
    optional={
        "text": st.text(max_size=60) | json_values,
        "message_id": st.sampled_from(["m-1", "m-2", ""]) | st.text(max_size=20),
        "speaker": st.text(max_size=10) | json_values,
        "occurred_at": times | json_values,
        "metadata": json_values,
        "query": st.text(max_size=60) | json_values,
        "as_of": times | json_values,
        "wait_for": st.integers() | json_values,
        "config_overrides": st.dictionaries(st.sampled_from(["candidate_pool", "topk_facts", "min_score", "x"]),
                                            st.integers(-10, 5000) | json_values, max_size=3) | json_values,
    },
)


good_times = st.sampled_from(["2024-05-01T10:00:00Z", "2199-12-31T23:59:59+14:00", "1900-01-01T00:00:00"])
valid_message = st.fixed_dictionaries(
    {"agent_id": st.just(AGENT), "text": st.text(min_size=1, max_size=60)},
    optional={"message_id": st.sampled_from(["m-1", "m-2"]) | st.uuids().map(str), "occurred_at": good_times,
              "speaker": st.sampled_from(["Ana", "Rui"])},
)
valid_retrieve = st.fixed_dictionaries(
    {"agent_id": st.just(AGENT), "query": st.text(max_size=60)},
    optional={"as_of": good_times, "config_overrides": st.fixed_dictionaries(
        {}, optional={"candidate_pool": st.integers(1, 1000), "topk_facts": st.integers(0, 500)})},
)


def _encode(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode("utf-8", "surrogatepass")


payloads = st.one_of(
    st.binary(max_size=300),
    json_values.map(_encode),
    message_like.map(_encode),
    valid_message.map(_encode),
    valid_retrieve.map(_encode),
    st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),
)


def _draw(strategy: st.SearchStrategy[bytes]) -> list[bytes]:
    drawn: list[bytes] = []

    @given(strategy)
    @settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    def collect(payload: bytes) -> None:
        drawn.append(payload)

    collect()
    return drawn


async def _exercise(nats_url: str, prefix: str, examples: list[bytes]) -> tuple[list[dict[str, Any]], int]:
    nc = await nats.connect(nats_url)
    try:
        replies = [json.loads((await nc.request(retrieve_subject(prefix), p, timeout=10)).data) for p in examples]
        ops = ["list_facts", "get_fact", "list_messages", "nope"]
        replies += [json.loads((await nc.request(f"{prefix}.manage.{ops[i % len(ops)]}", p, timeout=10)).data)
                    for i, p in enumerate(examples)]
        js = nc.jetstream()
        for p in examples:
            await js.publish(message_subject(AGENT, prefix), p, stream=messages_stream_name(prefix))
        return replies, len(examples)
    finally:
        await nc.close()


async def _dead_letter_count(nats_url: str, prefix: str) -> int:
    nc = await nats.connect(nats_url)
    try:
        return int((await nc.jetstream().stream_info(deadletter_stream_name(prefix))).state.messages)
    except Exception:  # noqa: BLE001 — no dead letter yet
        return 0
    finally:
        await nc.close()


def test_every_nats_payload_is_answered_or_settled(fresh_schema: Any, nats_url: str) -> None:
    _schema, env = fresh_schema("fuzznats")
    prefix = f"f{uuid.uuid4().hex[:8]}"
    examples = _draw(payloads)
    assert len(examples) == EXAMPLES
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as memory:
        collector = Collector()
        ingest = start_ingest(nats_url, memory.pipeline, prefix, collector)

        async def serve_and_send() -> tuple[list[dict[str, Any]], int]:
            broker = create_retrieve_broker(memory, nats_url, retrieve_subject(prefix))
            register_manage(broker, memory, f"{prefix}.manage")
            await broker.start()
            try:
                return await _exercise(nats_url, prefix, examples)
            finally:
                await broker.stop()

        try:
            replies, published = asyncio.run(serve_and_send())
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                settled = len(collector.results) + asyncio.run(_dead_letter_count(nats_url, prefix))
                if settled >= published:
                    break
                time.sleep(0.1)
        finally:
            ingest.stop()
    assert all(("result" in r) != ("error" in r) for r in replies), replies
    assert not [r for r in replies if r.get("error_type") == "internal"], replies
    assert settled == published, (settled, published)
    assert sum("result" in r for r in replies) >= EXAMPLES // 10 and len(collector.results) >= EXAMPLES // 10
