"""The change stream's publisher (ADR-0049): memory decisions, after they are committed, on
JetStream subjects ``<prefix>.changes.<agent_token>`` of the stream ``<PREFIX>_CHANGES``.

How it keeps its promises:
- **From the log, in log order**: it reads the notification log after the last position it
  published and publishes one change per memory decision (``projections/changes.py``), one at
  a time on one connection (acks awaited in windows) — so every agent's changes are on its
  subject in log order.
- **At least once, deduplicated**: every publication carries ``Nats-Msg-Id = <schema>:<position>``
  (JetStream drops a repeat inside its duplicate window) and the header
  ``Engramdb-Position``; a subscriber dedupes on ``position`` past the window.
- **Resumable**: on start it reads the position of the stream's last message and goes on
  after it; a crash (even ``kill -9``) between a publish and its ack republishes that change,
  which the dedupe id drops. A subscriber resumes from a stream sequence or a time
  (JetStream's ``deliver_policy``), or filters by position.
- **Erasure**: an erased agent's events no longer decrypt and map to nothing; at its
  ``Erased`` marker the agent's subject is purged, then the text-free marker is published.
- Never in the write or read path: it runs on its own thread and connection, so a slow NATS
  slows only the stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any
from uuid import UUID

import nats
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

from engramdb.domain.aggregate import AgentMemory
from engramdb.domain.erasure import UndecryptableEvent
from engramdb.projections.changes import change_of, may_be_change
from engramdb.services.entrypoints.nats.loop_thread import LoopThread
from engramdb.services.write.messages import DEFAULT_PREFIX, agent_token

log = logging.getLogger(__name__)
POSITION_HEADER = "Engramdb-Position"
PAGE = 500
WINDOW = 64  # publications in flight at once


def changes_stream_name(prefix: str = DEFAULT_PREFIX) -> str:
    return re.sub(r"[^A-Z0-9_]", "_", prefix.upper()) + "_CHANGES"


def changes_subject(agent_id: str, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.changes.{agent_token(agent_id)}"


class ChangePublisher(LoopThread):
    """Follows ``app``'s log and publishes its changes; ``start()`` / ``stop()``."""

    thread_name = "engramdb-changes"

    def __init__(self, app: Any, nats_url: str, prefix: str = DEFAULT_PREFIX, *,
                 poll_sec: float = 0.1, start_after: int = 0) -> None:
        """``start_after``: a new (empty) stream starts after this log position (default: the
        whole log is published once); a stream with changes always resumes where it ended."""
        super().__init__()
        self.app, self.nats_url, self.prefix, self.poll_sec = app, nats_url, prefix, poll_sec
        self.start_after = start_after
        self.stream = changes_stream_name(prefix)
        self.source = app.recorder.datastore.schema
        self.position = 0  # last log position published (or skipped: not a change)
        self.published = 0
        self._agents: dict[UUID, str] = {}

    async def _run(self) -> None:
        while not self.stopping:
            try:
                nc = await nats.connect(self.nats_url, max_reconnect_attempts=-1)
                try:
                    await self._follow(nc.jetstream())
                finally:
                    await nc.close()
            except Exception:  # a lost broker: log, wait, reconnect and resume
                log.exception("change stream publisher failed; resuming")
                await asyncio.sleep(1.0)

    async def _follow(self, js: Any) -> None:
        await self._ensure_stream(js)
        self.position = await self._resume_position(js)
        while not self.stopping:
            page = await asyncio.to_thread(
                self.app.recorder.select_notifications, self.position + 1, PAGE)
            changes = await asyncio.to_thread(self._changes, page)  # one thread hop a page
            for start in range(0, len(changes), WINDOW):
                await self._publish_window(js, changes[start:start + WINDOW])
            if page:
                self.position = page[-1].id
            if len(page) < PAGE:
                await asyncio.sleep(self.poll_sec)

    def _changes(self, page: list[Any]) -> list[tuple[int, str, dict[str, Any], bool]]:
        """(position, agent, change, is erasure) per change of a page, in log order."""
        out = []
        for notification in page:
            # most of the log is not a change (a turn's Recorded / Processed, job bookkeeping):
            # told by the stored topic, it is never decrypted nor deserialized here
            if not may_be_change(notification.topic):
                continue
            event = self.app.mapper.to_domain_event(notification)
            if isinstance(event, UndecryptableEvent):
                continue
            agent = self._agent_of(event)
            change = change_of(notification.id, agent, event) if agent else None
            if change is not None and agent is not None:
                out.append((notification.id, agent, change, isinstance(event, AgentMemory.Erased)))
        return out

    async def _publish_window(self, js: Any, window: list[tuple[int, str, dict[str, Any], bool]]) -> None:
        """Publish up to ``WINDOW`` changes with their acks awaited together: JetStream keeps
        one connection's publications in the order sent. An erasure waits for what was sent
        before it, then purges the agent's subject, then publishes its marker."""
        pending: list[Any] = []
        for position, agent, change, erasure in window:
            subject = changes_subject(agent, self.prefix)
            if erasure:
                await asyncio.gather(*pending)
                pending = []
                await js.purge_stream(self.stream, subject=subject)
            pending.append(asyncio.ensure_future(js.publish(
                subject, json.dumps(change, default=str).encode("utf-8"), headers={
                    "Nats-Msg-Id": f"{self.source}:{position}", POSITION_HEADER: str(position)})))
            await asyncio.sleep(0)  # let it be written before the next one is created
        await asyncio.gather(*pending)
        self.published += len(window)

    async def _ensure_stream(self, js: Any) -> None:
        try:
            await js.stream_info(self.stream)
        except NotFoundError:
            await js.add_stream(config=StreamConfig(
                name=self.stream, subjects=[f"{self.prefix}.changes.>"], duplicate_window=600.0))

    async def _resume_position(self, js: Any) -> int:
        info = await js.stream_info(self.stream)
        seq = info.state.last_seq
        while info.state.messages and seq >= max(1, info.state.first_seq):
            try:  # the newest may be purged (an erasure stopped before its marker went out)
                last = await js.get_msg(self.stream, seq)
            except NotFoundError:
                seq -= 1
                continue
            return int((last.headers or {}).get(POSITION_HEADER, 0))
        return self.start_after

    def _agent_of(self, event: Any) -> str | None:
        oid = event.originator_id
        agent = getattr(event, "agent_id", None)
        if isinstance(agent, str):
            self._agents[oid] = agent
            return agent
        if oid not in self._agents:
            opened = list(self.app.events.get(oid, lte=1))
            found = getattr(opened[0], "agent_id", None) if opened else None
            if not isinstance(found, str):
                return None
            self._agents[oid] = found
        return self._agents[oid]
