"""Retrieval feedback: which facts retrieve returned, sent to a JetStream stream for the jobs.

Why a stream and not a write per retrieve: retrieve is the hot read path and must stay a
read. A notice (agent, fact ids, time) is handed to a bounded in-process queue and published
by a background thread as a core-NATS message onto ``<prefix>.feedback.<agent-token>``; the
``<PREFIX>_FEEDBACK`` stream keeps it for ``retention_days``. Retrieve never waits for NATS
and never fails because of it: a full queue or a broker outage drops notices (counted in
``dropped``). The importance jobs read the stream later and turn it into events (ADR-0019).
Without NATS (the plain Python ``Memory``) no notices are sent: usage then counts nothing,
and importance rests on the other inputs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import re
import threading
import time
from datetime import UTC, datetime
from typing import Any

from nats.js.api import RetentionPolicy, StreamConfig

from engramdb.infra.nats_auth import nats_servers
from engramdb.services.write.messages import DEFAULT_PREFIX, agent_token

log = logging.getLogger(__name__)
DEFAULT_RETENTION_DAYS = 30.0
QUEUE_SIZE = 10_000
RETRY_AFTER_SEC = 5.0  # how long notices are dropped after the broker could not be reached
FULL_WARNING_EVERY_SEC = 60.0  # a full queue is said at most this often (retrieve is hot)


def feedback_subject(agent_id: str, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.feedback.{agent_token(agent_id)}"


def feedback_stream_name(prefix: str = DEFAULT_PREFIX) -> str:
    return re.sub(r"[^A-Z0-9_]", "_", prefix.upper()) + "_FEEDBACK"


def feedback_stream_config(
    prefix: str = DEFAULT_PREFIX, retention_days: float = DEFAULT_RETENTION_DAYS
) -> StreamConfig:
    return StreamConfig(
        name=feedback_stream_name(prefix),
        subjects=[f"{prefix}.feedback.>"],
        retention=RetentionPolicy.LIMITS,  # consumers keep their cursor in the event log
        max_age=retention_days * 86400.0,
        num_replicas=_replicas(),  # a NATS cluster (ADR-0020)
    )


def _replicas() -> int:
    from engramdb.infra.settings import load_settings

    return load_settings().nats_stream_replicas


def notice_bytes(agent_id: str, fact_ids: list[str], at: datetime) -> bytes:
    return json.dumps({"agent_id": agent_id, "fact_ids": fact_ids,
                       "at": at.astimezone(UTC).isoformat()}).encode()


async def ensure_feedback_stream(js: Any, config: StreamConfig) -> None:
    from nats.js.errors import NotFoundError

    try:
        await js.stream_info(config.name)
    except NotFoundError:
        await js.add_stream(config=config)


class FeedbackPublisher:
    """Fire-and-forget notices from sync code: ``notify`` only enqueues (never blocks)."""

    def __init__(self, nats_url: str, prefix: str = DEFAULT_PREFIX,
                 retention_days: float = DEFAULT_RETENTION_DAYS) -> None:
        self.nats_url = nats_url
        self.prefix = prefix
        self.retention_days = retention_days
        self.sent = 0
        self.dropped = 0
        self._next_full_warning = 0.0
        self._queue: queue.Queue[bytes | None] = queue.Queue(QUEUE_SIZE)
        self._thread = threading.Thread(target=self._run, name="engramdb-feedback", daemon=True)
        self._thread.start()

    def notify(self, agent_id: str, fact_ids: list[str], at: datetime | None = None) -> None:
        if not fact_ids:
            return
        try:
            self._queue.put_nowait(notice_bytes(agent_id, fact_ids, at or datetime.now(UTC)))
        except queue.Full:
            self.dropped += 1
            now = time.monotonic()
            if now >= self._next_full_warning:
                self._next_full_warning = now + FULL_WARNING_EVERY_SEC
                log.warning("retrieval feedback queue full (%d notices): %d dropped so far; "
                            "the broker is slower than retrieve — importance will undercount "
                            "usage", QUEUE_SIZE, self.dropped)

    def flush(self, timeout: float = 5.0) -> None:
        """Wait until queued notices were handed to NATS (tests, shutdown)."""
        pause = threading.Event()
        for _ in range(int(timeout * 100)):
            if self._queue.unfinished_tasks == 0:
                return
            pause.wait(0.01)

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self.flush(2.0)
        self._queue.put(None)
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        asyncio.run(self._publish_forever())

    async def _publish_forever(self) -> None:
        import nats

        loop = asyncio.get_running_loop()
        nc: Any = None
        down_until = 0.0  # after a failed connect, drop notices for a while instead of retrying
        try:
            while True:
                item = await loop.run_in_executor(None, self._queue.get)
                if item is None:
                    self._queue.task_done()
                    return
                try:
                    if nc is None or nc.is_closed:
                        if time.monotonic() < down_until:
                            self.dropped += 1
                            continue
                        # few reconnects: a closed connection is replaced at the next notice
                        nc = await nats.connect(nats_servers(self.nats_url), connect_timeout=2,
                                                max_reconnect_attempts=2, reconnect_time_wait=0.5)
                        await ensure_feedback_stream(
                            nc.jetstream(timeout=2.0),
                            feedback_stream_config(self.prefix, self.retention_days))
                    agent = json.loads(item)["agent_id"]
                    await nc.publish(feedback_subject(agent, self.prefix), item)
                    await nc.flush(timeout=2)
                    self.sent += 1
                except Exception as exc:  # noqa: BLE001 - feedback is best effort by design
                    self.dropped += 1
                    if nc is None or nc.is_closed:
                        down_until = time.monotonic() + RETRY_AFTER_SEC
                    log.warning("retrieval feedback dropped (%s: %s)", type(exc).__name__, exc)
                finally:
                    self._queue.task_done()
        finally:
            if nc is not None and not nc.is_closed:
                await nc.close()
