"""Erasing an agent's messages from the NATS streams (issue 28 item 2, ADR-0051).

Why: the message stream keeps each raw turn in clear for its ``max_age`` (7 days by default)
and the dead-letter stream kept payloads inline with no age limit, so "erased" text lived on
in NATS. Each of the agent's messages is deleted by sequence (``STREAM.MSG.DELETE`` without
``no_erase``: the server overwrites the stored bytes, which a purge does not promise):

- message stream: the agent's subjects, ``<prefix>.messages.<partition>.<token>`` (the
  stream's partition transform) and the unpartitioned ``<prefix>.messages.<token>``;
- dead-letter stream: its subject names no agent, so each letter's body is read and those
  whose ``agent_id`` is the agent's, or whose subject carries its token, are deleted.

Streams that do not exist (no ingest ever ran) are skipped. The scan reads with an
ephemeral ordered consumer, so no durable consumer's position changes.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import nats
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy
from nats.js.errors import NotFoundError

from engramdb.services.write.messages import (
    agent_token,
    deadletter_stream_name,
    messages_stream_name,
)


@dataclass(frozen=True)
class StreamErasure:
    messages_deleted: int
    dead_letters_deleted: int


async def _matching(js: JetStreamContext, stream: str, subject: str,
                    keep: object = None) -> list[int]:
    """Sequences of the messages on ``subject`` (a filter) in ``stream`` for which
    ``keep(msg)`` holds (all when ``keep`` is None)."""
    try:
        info = await js.stream_info(stream)
    except NotFoundError:
        return []
    if info.state.messages == 0:
        return []
    sub = await js.subscribe(subject, stream=stream, ordered_consumer=True,
                             deliver_policy=DeliverPolicy.ALL)
    seqs: list[int] = []
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=1.0)
            except (NatsTimeoutError, TimeoutError):
                break
            meta = msg.metadata
            if keep is None or keep(msg):  # type: ignore[operator]
                seqs.append(meta.sequence.stream)
            if meta.num_pending == 0:
                break
    finally:
        await sub.unsubscribe()
    return seqs


async def erase_from_streams(nats_url: str, prefix: str, agent_id: str) -> StreamErasure:
    token = agent_token(agent_id)
    nc = await nats.connect(nats_url, connect_timeout=5, max_reconnect_attempts=0)
    try:
        js = nc.jetstream()
        stream = messages_stream_name(prefix)
        seqs = await _matching(js, stream, f"{prefix}.messages.*.{token}")
        seqs += await _matching(js, stream, f"{prefix}.messages.{token}")
        for seq in seqs:
            await js.delete_msg(stream, seq)

        def is_agents(msg: Msg) -> bool:
            try:
                body = json.loads(msg.data)
            except ValueError:
                return False
            if not isinstance(body, dict):
                return False
            return body.get("agent_id") == agent_id or token in str(body.get("subject") or "")

        dead = deadletter_stream_name(prefix)
        dead_seqs = await _matching(js, dead, ">", keep=is_agents)
        for seq in dead_seqs:
            await js.delete_msg(dead, seq)
        return StreamErasure(len(seqs), len(dead_seqs))
    finally:
        await nc.close()


def erase_agent_streams(nats_url: str, prefix: str, agent_id: str) -> StreamErasure:
    """Blocking wrapper (the facade is synchronous)."""
    return asyncio.run(erase_from_streams(nats_url, prefix, agent_id))
