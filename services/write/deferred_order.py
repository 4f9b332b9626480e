"""Keep an agent's order across an LLM outage (ADR-0014): deferred messages go first.

Why: a message deferred by an outage is extracted later, and its decisions are reconciled
against memory as it is *then*. If a newer message of the same agent were extracted first
("I moved to Lisbon" before the older "I live in Porto"), the older one would UPDATE the newer
fact. So before extracting a message, the pipeline re-extracts the agent's messages it
deferred earlier, in order; while one of them still cannot be extracted, the new message is
an outage too (deferred or raised, like a failed call), without another LLM call.

The list is this process's memory (a dict lookup per write, no query): it covers one ingest
process or the Python API. Messages deferred by another process, or before a restart, are
picked up by the retrier (``services.management.pending``) within its interval; until then a newer
message of that agent may be extracted first — the remaining gap, stated in ADR-0014.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from eventsourcing.persistence import RecordConflictError

from engramdb.domain.aggregate import MessageRecord
from engramdb.services.write.messages import ConversationMessage
from engramdb.services.write.models import ExtractionUnavailable

log = logging.getLogger(__name__)


def request_from_record(record: MessageRecord) -> ConversationMessage:
    """The message as it was recorded (writing it again resumes its record)."""
    return ConversationMessage(
        agent_id=record.agent_id,
        message_id=record.message_id,
        session_id=record.session_id,
        speaker=record.speaker,
        text=record.text,
        occurred_at=record.occurred_at,
        metadata=dict(record.metadata),
    )


def save_deferral(
    app: Any, commits: Any, record: MessageRecord, reason: str, attempts: int
) -> int | None:
    """Save ``ExtractionDeferred`` on ``record`` alone; its position, or None if another
    worker processed the message meanwhile (a conflict on a processed record)."""
    record.defer_extraction(reason=reason, attempts=attempts)
    try:
        recordings = commits.save(record)
    except RecordConflictError:
        app.forget_cached(record.id)
        fresh = app.message_record(record.agent_id, record.message_id)
        if fresh is not None and fresh.processed:
            return None
        raise
    except BaseException:
        app.forget_cached(record.id)  # the cached record is ahead of the log now
        raise
    log.warning("extraction of %s/%s deferred (attempt %d): %s",
                record.agent_id, record.message_id, attempts, reason)
    return int(recordings[-1].notification.id) if recordings else 0


class DeferredOrder:
    """Per agent, the ids of messages this process deferred and has not seen extracted."""

    def __init__(self) -> None:
        self._ids: dict[str, list[str]] = {}
        self._guard = threading.Lock()

    def note(self, agent_id: str, message_id: str) -> None:
        with self._guard:
            ids = self._ids.setdefault(agent_id, [])
            if message_id not in ids:
                ids.append(message_id)

    def catch_up(
        self,
        agent_id: str,
        current_message_id: str,
        load: Callable[[str, str], MessageRecord | None],
        extract: Callable[[MessageRecord], object],
    ) -> str | None:
        """Extract the agent's earlier deferred messages (caller holds the agent's lock).

        Returns None when none is left ahead of ``current_message_id``, else why the current
        message must wait (the outage error of the one still pending)."""
        with self._guard:
            ids = list(self._ids.get(agent_id, ()))
        for message_id in ids:
            if message_id == current_message_id:
                break  # the message itself is being written: nothing older is left
            record = load(agent_id, message_id)
            if record is not None and not record.processed:
                try:
                    extract(record)
                except ExtractionUnavailable as exc:
                    return f"earlier message {message_id!r} of this agent is still pending: {exc.reason}"
            self.forget(agent_id, message_id)
        return None

    def forget(self, agent_id: str, message_id: str) -> None:
        with self._guard:
            ids = self._ids.get(agent_id)
            if ids is not None and message_id in ids:
                ids.remove(message_id)
                if not ids:
                    del self._ids[agent_id]

    def pending(self, agent_id: str) -> list[str]:
        with self._guard:
            return list(self._ids.get(agent_id, ()))
