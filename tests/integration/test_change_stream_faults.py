"""The change stream across a ``kill -9`` of ``engramdb serve`` mid-ingest (ADR-0049): real
``serve`` subprocesses with ``ENGRAMDB_CHANGE_STREAM=1``, real PostgreSQL and NATS. After the
restart has ingested everything, a subscriber reading the stream sees every memory change of
the 300-message ingest exactly once after dedupe on ``position``, in per-agent log order.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import nats
from test_faults import own_nats, serve_factory, workdir  # noqa: F401 — fixtures

from engramdb.infra.embedded_nats import NatsHandle
from engramdb.projections.changes import change_of
from engramdb.services.entrypoints.nats.changes import ChangePublisher, changes_stream_name
from engramdb.services.memory.event_log import EventLog
from tests.support.fault_harness import (
    Serve,
    assert_all_processed_once,
    counts,
    publish,
    wait_for,
    workload,
)

N, AGENTS = 300, 4


async def _stream(nats_url: str) -> list[dict[str, Any]]:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        total = (await js.stream_info(changes_stream_name())).state.messages
        sub = await js.subscribe("engramdb.changes.>", ordered_consumer=True)
        out = []
        while len(out) < total:
            msg = await sub.next_msg(timeout=5.0)
            out.append(json.loads(msg.data))
        return out
    finally:
        await nc.close()


def _expected(es_env: dict[str, str]) -> dict[str, list[int]]:
    app = EventLog(es_env)
    try:
        helper, out = ChangePublisher(app, "nats://unused"), {}
        for n in app.recorder.select_notifications(1, 1_000_000):
            event = app.mapper.to_domain_event(n)
            agent = helper._agent_of(event)
            if agent and change_of(n.id, agent, event) is not None:
                out.setdefault(agent, []).append(n.id)
        return out
    finally:
        app.close()


def test_kill_9_serve_mid_ingest_change_stream(
    pg_url: str,
    fresh_schema: Callable[..., tuple[str, dict[str, str]]],
    own_nats: Callable[[], NatsHandle],  # noqa: F811
    serve_factory: Callable[..., Serve],  # noqa: F811
) -> None:
    schema, es_env = fresh_schema("chfault")
    nats_url = own_nats().url
    env = {"ENGRAMDB_DATABASE_URL": pg_url, "ENGRAMDB_DB_SCHEMA": schema,
           "ENGRAMDB_NATS_URL": nats_url, "ENGRAMDB_CHANGE_STREAM": "1"}
    serve = serve_factory(**env)
    publish(nats_url, workload(N, AGENTS, "kill-changes"))
    wait_for(lambda: counts(pg_url, schema).processed_records >= N // 4, 60, "ingest under way")
    serve.kill()  # SIGKILL: the publisher dies between any two publications
    assert counts(pg_url, schema).processed_records < N, "the kill came too late"
    serve = serve_factory(**env)
    assert_all_processed_once(serve, pg_url, schema, nats_url, N, timeout=120)
    expected = _expected(es_env)
    want = sum(len(v) for v in expected.values())
    deadline = time.monotonic() + 60
    received: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        received = asyncio.run(_stream(nats_url))
        if len({c["position"] for c in received}) >= want:
            break
        time.sleep(1.0)
    assert len(expected) == AGENTS
    for agent, positions in expected.items():
        seen: list[int] = []
        for c in received:  # dedupe on position, keep the order of the stream
            if c["agent_id"] == agent and c["position"] not in seen:
                seen.append(c["position"])
        assert seen == positions, agent
    print(f"change stream across kill -9: {want} changes, {len(received)} received before dedupe")
