"""The change stream on REAL NATS JetStream and PostgreSQL (ADR-0049): every memory decision
of a 300-message ingest reaches a subscriber exactly once after dedupe, in per-agent log
order, across a publisher that stops mid-ingest and one that restarts behind (as after a
crash that lost acks: it republishes, and the dedupe id drops the repeats); an erased agent's
subject is purged and ends with a text-free marker.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import nats
import pytest

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.projections.changes import change_of
from engramdb.services.entrypoints.nats.changes import (
    ChangePublisher,
    changes_stream_name,
    changes_subject,
)
from engramdb.services.memory.facade import Memory

TEXTS = ["I live in Recife.", "I work at Vertix.", "I like sushi.", "I moved to Porto.",
         "My sister Bia lives in Lisbon.", "I have a cat named Mia.", "I like ramen.",
         "I work at Globex now.", "Bia works at Initech.", "I don't like sushi anymore."]


@pytest.fixture
def memory(fresh_schema: Any) -> Iterator[Memory]:
    _schema, env = fresh_schema("changes")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield mem


def _expected(memory: Memory, agents: list[str]) -> dict[str, list[int]]:
    """Per agent, the log positions that are changes (read from the log itself)."""
    out: dict[str, list[int]] = {a: [] for a in agents}
    pub = ChangePublisher(memory.app, "nats://unused")
    for n in memory.app.recorder.select_notifications(1, 100_000):
        event = memory.app.mapper.to_domain_event(n)
        agent = pub._agent_of(event)
        if agent in out and change_of(n.id, agent, event) is not None:
            out[agent].append(n.id)
    return out


async def _read_all(nats_url: str, prefix: str, agent: str | None = None) -> list[dict[str, Any]]:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        subject = changes_subject(agent, prefix) if agent else f"{prefix}.changes.>"
        sub = await js.subscribe(subject, ordered_consumer=True)
        info = await js.stream_info(changes_stream_name(prefix))
        want = info.state.messages if agent is None else None
        out: list[dict[str, Any]] = []
        while True:
            try:
                msg = await sub.next_msg(timeout=1.0)
            except nats.errors.TimeoutError:
                break
            out.append({**json.loads(msg.data), "_subject": msg.subject})
            if want is not None and len(out) >= want:
                break
        return out
    finally:
        await nc.close()


class Behind(ChangePublisher):
    """A publisher restarting ``lag`` positions behind the stream: a crash that lost acks."""

    lag = 40

    async def _resume_position(self, js: Any) -> int:
        return max(0, await super()._resume_position(js) - self.lag)


def test_every_change_once_in_order_across_restarts(memory: Memory, nats_url: str) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    agents = [f"agent-{uuid.uuid4().hex[:8]}" for _ in range(3)]

    def ingest(agent: str) -> None:
        for i in range(100):
            memory.write(agent, TEXTS[i % len(TEXTS)], speaker="Ana", message_id=f"m{i}")

    first = ChangePublisher(memory.app, nats_url, prefix).start()
    writers = [threading.Thread(target=ingest, args=(a,)) for a in agents]
    for w in writers:
        w.start()
    time.sleep(1.0)
    first.stop()  # mid-ingest
    stopped_at = first.position
    second = Behind(memory.app, nats_url, prefix).start()
    for w in writers:
        w.join()
    head = memory.app.recorder.max_notification_id()
    deadline = time.monotonic() + 60
    while second.position < head and time.monotonic() < deadline:
        time.sleep(0.1)
    second.stop()
    assert 0 < stopped_at < head, "the first publisher stopped mid-ingest"

    received = asyncio.run(_read_all(nats_url, prefix))
    expected = _expected(memory, agents)
    for agent in agents:
        mine = [c for c in received if c["agent_id"] == agent]
        positions = [c["position"] for c in mine]
        assert len(set(positions)) == len(positions), "JetStream dropped the republished repeats"
        assert positions == expected[agent]  # every change, once, in log order
        assert {c["_subject"] for c in mine} == {changes_subject(agent, prefix)}
    kinds = {c["kind"] for c in received}
    assert {"fact.added", "entity.created", "fact.confirmed"} <= kinds


def test_erased_agent_subject_is_purged(memory: Memory, nats_url: str) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    agent, other = f"agent-{uuid.uuid4().hex[:8]}", f"agent-{uuid.uuid4().hex[:8]}"
    for a in (agent, other):
        memory.write(a, "I live in Recife.", speaker="Ana", message_id="m1")
    publisher = ChangePublisher(memory.app, nats_url, prefix).start()
    try:
        memory.erase_agent(agent, actor="dpo")
        head = memory.app.recorder.max_notification_id()
        deadline = time.monotonic() + 30
        while publisher.position < head and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        publisher.stop()
    [marker] = asyncio.run(_read_all(nats_url, prefix, agent))
    assert marker["kind"] == "agent.erased" and "text" not in marker and "decided_by" not in marker
    others = asyncio.run(_read_all(nats_url, prefix, other))
    assert any(c.get("text") == "Ana lives in Recife" or c["kind"] == "fact.added" for c in others)
