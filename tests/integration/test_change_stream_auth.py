"""Who may read the change stream (ADR-0049), on the embedded NATS with its generated
permissions: a user made by ``create_publisher`` for agent A (``engramdb nats-user create
--agent A``) reads A's changes through its own consumer, and cannot create a consumer on B's
changes, nor read A's through another consumer name.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.infra.settings import Settings
from engramdb.services.entrypoints.nats.changes import (
    ChangePublisher,
    changes_stream_name,
    changes_subject,
)
from engramdb.services.entrypoints.nats.users import changes_consumer, create_publisher
from engramdb.services.memory.facade import Memory

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("ENGRAMDB_TEST_NATS_URL")), reason="permissions of the embedded NATS"
)


@pytest.fixture
def memory(fresh_schema: Any) -> Iterator[Memory]:
    _schema, env = fresh_schema("chauth")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield mem


async def test_a_user_reads_only_its_agents_changes(memory: Memory, nats_url: str,
                                                    embedded_data_dir: Path) -> None:
    prefix = f"auth{uuid.uuid4().hex[:8]}"
    a, b = f"agent-{uuid.uuid4().hex[:8]}", f"agent-{uuid.uuid4().hex[:8]}"
    for agent in (a, b):
        memory.write(agent, "I live in Recife.", speaker="Ana", message_id="m1")
    publisher = ChangePublisher(memory.app, nats_url, prefix, poll_sec=0.05).start()
    head = memory.app.recorder.max_notification_id()
    deadline = time.monotonic() + 30
    while publisher.position < head and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    publisher.stop()
    pub = create_publisher(Settings(data_dir=embedded_data_dir, subject_prefix=prefix), [a])
    stream = changes_stream_name(prefix)
    nc = await nats.connect(pub.url, inbox_prefix=pub.inbox_prefix, allow_reconnect=False,
                            error_cb=_ignore)
    try:
        js = nc.jetstream()
        own = changes_consumer(pub.user, a)
        await js.add_consumer(stream, ConsumerConfig(
            name=own, filter_subject=changes_subject(a, prefix), ack_policy=AckPolicy.EXPLICIT))
        sub = await js.pull_subscribe_bind(own, stream)
        got = [json.loads(m.data) for m in await sub.fetch(50, timeout=3)]
        assert got and {c["agent_id"] for c in got} == {a}
        for name, subject in ((changes_consumer(pub.user, b), changes_subject(b, prefix)),
                              (own, changes_subject(b, prefix)),
                              ("other", changes_subject(a, prefix))):
            with pytest.raises((nats.errors.TimeoutError, nats.js.errors.Error, nats.errors.Error)):
                await js.add_consumer(stream, ConsumerConfig(name=name, filter_subject=subject),
                                      timeout=1.5)
    finally:
        await nc.close()


async def _ignore(_exc: Exception) -> None:
    """Permission violations are reported here too; the assertions are on the calls."""
