"""Erasing an agent's messages from the NATS streams (issue 28 item 2, ADR-0051).

Why: the message stream keeps each raw turn in clear for its ``max_age`` (7 days by default)
and the dead-letter stream kept payloads inline with no age limit, so "erased" text lived on
in NATS. Each of the agent's messages is deleted by sequence (``STREAM.MSG.DELETE`` without
``no_erase``: the server overwrites the stored bytes, which a purge does not promise):

- message stream: the agent's subjects, ``<prefix>.messages.<partition>.<token>`` (the
  stream's partition transform) and the unpartitioned ``<prefix>.messages.<token>``;
- dead-letter stream: its subject names no agent, so each letter's body is read and those
  whose ``agent_id`` is the agent's, or whose subject carries its token, are deleted;
- change stream (ADR-0049): the agent's subject ``<prefix>.changes.<token>`` — its changes
  carry fact texts. The change publisher purges that subject at the ``Erased`` marker, but a
  purge does not overwrite the stored bytes; the text-free ``agent.erased`` change is kept
  (webhooks and subscribers are told of the erasure);
- webhook dead-letter stream: undeliverable changes, their bodies with the agent's texts;
  those whose ``agent_id`` is the agent's are deleted (issue 28: "every stream").

Streams that do not exist (no ingest ever ran) are skipped. The scan reads with an
ephemeral ordered consumer, so no durable consumer's position changes.
"""

from __future__ import annotations

import asyncio
import json
import re
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
    messages_deleted: int  # turns (message stream) and changes (change stream)
    dead_letters_deleted: int  # ingest and webhook dead letters


def _stream_base(prefix: str) -> str:
    """The stream-name stem of ``entrypoints/nats/changes.changes_stream_name`` (not imported:
    management may not import an entry point)."""
    return re.sub(r"[^A-Z0-9_]", "_", prefix.upper())


def _body(msg: Msg) -> dict[str, object]:
    try:
        body = json.loads(msg.data)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


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
            body = _body(msg)
            return body.get("agent_id") == agent_id or token in str(body.get("subject") or "")

        dead = deadletter_stream_name(prefix)
        dead_seqs = await _matching(js, dead, ">", keep=is_agents)
        for seq in dead_seqs:
            await js.delete_msg(dead, seq)

        changes = _stream_base(prefix) + "_CHANGES"
        change_seqs = await _matching(js, changes, f"{prefix}.changes.{token}",
                                      keep=lambda m: _body(m).get("kind") != "agent.erased")
        for seq in change_seqs:
            await js.delete_msg(changes, seq)
        hooks_dead = _stream_base(prefix) + "_WEBHOOK_DEAD"
        hook_seqs = await _matching(js, hooks_dead, ">",
                                    keep=lambda m: _body(m).get("agent_id") == agent_id)
        for seq in hook_seqs:
            await js.delete_msg(hooks_dead, seq)
        return StreamErasure(len(seqs) + len(change_seqs), len(dead_seqs) + len(hook_seqs))
    finally:
        await nc.close()


def erase_agent_streams(nats_url: str, prefix: str, agent_id: str) -> StreamErasure:
    """Blocking wrapper (the facade is synchronous)."""
    return asyncio.run(erase_from_streams(nats_url, prefix, agent_id))
