"""Publish conversation messages onto JetStream (the users' write entry point, docs/spec.md §0).

Every message goes to ``<prefix>.messages.<agent_token>`` with a ``Nats-Msg-Id`` header
derived from (agent_id, message_id), so the server drops a re-publication inside the
stream's duplicate window; the write pipeline's ``MessageRecord`` catches anything later.
The publisher declares the stream if it is missing, so ``engramdb publish`` works before
any ingest worker ever started (messages wait in the stream).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import nats
from nats.js.api import PubAck, StreamConfig
from nats.js.errors import NotFoundError

from engramdb.infra.nats_auth import nats_servers
from engramdb.services.entrypoints.nats.ingest.partitions import (
    messages_stream_config as partitioned_stream_config,
)
from engramdb.services.write.messages import (
    DEFAULT_PREFIX,
    ConversationMessage,
    dedup_id,
    message_subject,
    messages_stream_name,
)


def messages_stream_config(prefix: str = DEFAULT_PREFIX) -> StreamConfig:
    """The ingest's own stream config (partitioned by agent, ADR-0020): a stream created
    here before any ingest started stores its turns where the partition consumers read."""
    return partitioned_stream_config(prefix)


async def ensure_stream(js: Any, config: StreamConfig) -> None:
    try:
        await js.stream_info(config.name)
    except NotFoundError:
        await js.add_stream(config=config)


class MessagePublisher:
    """One connection for many publications (``async with MessagePublisher(url) as p``)."""

    def __init__(
        self,
        nats_url: str,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = 5.0,
        *,
        inbox_prefix: str | None = None,
        one_shot: bool = False,
    ) -> None:
        """``inbox_prefix``: ``_INBOX_<user>`` for a publisher identity (ADR-0011);
        ``one_shot``: fail at once (``NoServersError``) when NATS is unreachable, silently,
        instead of reconnecting forever — for the CLI, which publishes once and exits."""
        self.nats_url = nats_url
        self.prefix = prefix
        self.timeout = timeout
        self.inbox_prefix = inbox_prefix
        self.one_shot = one_shot
        self._nc: Any = None
        self._js: Any = None

    async def __aenter__(self) -> MessagePublisher:
        # reconnect forever: a long-lived publisher must outlive a NATS restart (publishes
        # during the outage fail after ``timeout``; the connection itself comes back)
        extra: dict[str, Any] = {"inbox_prefix": self.inbox_prefix} if self.inbox_prefix else {}
        if self.one_shot:
            extra.update(max_reconnect_attempts=1, reconnect_time_wait=0.2, error_cb=_quiet)
        else:
            extra.update(max_reconnect_attempts=-1)
        self._nc = await nats.connect(nats_servers(self.nats_url), connect_timeout=self.timeout, **extra)
        self._js = self._nc.jetstream(timeout=self.timeout)
        try:
            await ensure_stream(self._js, messages_stream_config(self.prefix))
        except nats.errors.TimeoutError:  # a publisher identity may not create streams
            await self._nc.close()
            raise RuntimeError(
                f"stream {messages_stream_name(self.prefix)} does not exist and these NATS "
                "credentials may not create it: start `engramdb serve` first"
            ) from None
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._nc is not None:
            await self._nc.drain()
            self._nc = None

    async def publish(self, message: ConversationMessage) -> PubAck:
        return await self._js.publish(
            message_subject(message.agent_id, self.prefix),
            message.to_json_bytes(),
            timeout=self.timeout,
            stream=messages_stream_name(self.prefix),
            headers={"Nats-Msg-Id": dedup_id(message.agent_id, message.message_id),
                     "content-type": "application/json"},
        )

    async def publish_raw(self, agent_id: str, payload: bytes, headers: dict[str, str] | None = None) -> PubAck:
        """Publish bytes as they are (tests and tools: poison messages, foreign producers)."""
        return await self._js.publish(
            message_subject(agent_id, self.prefix), payload, timeout=self.timeout,
            stream=messages_stream_name(self.prefix), headers=headers,
        )

    async def publish_many(self, messages: Iterable[ConversationMessage]) -> list[PubAck]:
        """Pipelined publication (acks awaited together); per-agent order is kept because
        publications of one connection reach the server in order."""
        futures = [
            await self._js.publish_async(
                message_subject(m.agent_id, self.prefix),
                m.to_json_bytes(),
                headers={"Nats-Msg-Id": dedup_id(m.agent_id, m.message_id), "content-type": "application/json"},
            )
            for m in messages
        ]
        return list(await asyncio.gather(*futures))


async def _quiet(_exc: Exception) -> None:
    """nats-py's error callback; a one-shot publisher reports the failure itself."""


async def publish_message_async(
    nats_url: str, message: ConversationMessage, timeout: float = 5.0, prefix: str = DEFAULT_PREFIX
) -> PubAck:
    async with MessagePublisher(nats_url, prefix, timeout, one_shot=True) as publisher:
        return await publisher.publish(message)


def publish_message(
    nats_url: str, message: ConversationMessage, timeout: float = 5.0, prefix: str = DEFAULT_PREFIX
) -> PubAck:
    """Sync wrapper (for the CLI and scripts; not for use inside a running event loop)."""
    return asyncio.run(publish_message_async(nats_url, message, timeout, prefix))


def publish_cli(
    nats_url: str,
    agent: str,
    text: str,
    message_id: str | None = None,
    speaker: str | None = None,
    session: str | None = None,
    occurred_at: datetime | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> str:
    """``engramdb publish``: validate, publish, and return a one-line report (raises
    ``services.write.messages.InvalidMessage`` with the reason for an invalid message)."""
    from engramdb.services.write.messages import parse_message

    data: dict[str, Any] = {"agent_id": agent, "text": text, "speaker": speaker, "session_id": session}
    if message_id:
        data["message_id"] = message_id
    if occurred_at is not None:
        data["occurred_at"] = occurred_at
    message = parse_message(data)
    ack = publish_message(nats_url, message, prefix=prefix)
    dup = " (duplicate: already in the stream)" if ack.duplicate else ""
    return (
        f"published message {message.message_id} for agent {message.agent_id} "
        f"to {ack.stream} seq {ack.seq}{dup}"
    )
