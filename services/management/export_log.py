"""``engramdb export``: one agent's event log, decrypted for its owner, as versioned JSONL
(ADR-0049). Format ``engramdb-export`` version 1 (``docs/export-format.md``):

- line 1, the header: ``{"kind": "header", "format": "engramdb-export", "version": 1,
  "agent_id", "exported_at", "events"}``;
- then one line per stored event of the agent's aggregates (its memory, every message record,
  its jobs), in log order: ``{"kind": "event", "position", "originator_id",
  "originator_version", "topic", "timestamp", "state"}`` — ``state`` is the event as the
  library's transcoder writes it, in clear (the target encrypts it under its own key);
- last, ``{"kind": "end", "events": N, "sha256"}`` over the event lines, so a truncated or
  edited file is refused on import.

Why the log and not the read models: the log is the memory (read models are rebuilt from it,
ADR-0005), so an import replays exactly what was decided — ids, times and provenance — and
never calls an LLM or an embedder the log already answered. An erased agent exports nothing:
its key is gone and ``AgentErasedError`` says so before a line is written.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from eventsourcing.persistence import Mapper, StoredEvent
from psycopg import sql

from engramdb.domain.erasure import AgentErasedError, UndecryptableEvent
from engramdb.domain.keys import agent_aggregate_id
from engramdb.services.management.erase import _head_and_originators
from engramdb.services.management.models import NotFoundError

FORMAT, VERSION = "engramdb-export", 1


def plain_mapper(app: Any) -> Mapper[Any]:
    """The application's transcoder without its cipher: states in clear."""
    return Mapper(transcoder=app.mapper.transcoder)


def _rows(app: Any, agent_id: str) -> list[dict[str, Any]]:
    events = sql.Identifier(app.recorder.datastore.schema, app.recorder.events_table_name)
    with app.recorder.datastore.transaction(commit=False) as curs:
        head, encrypted, clear = _head_and_originators(curs, events, agent_id)
        originators = sorted({agent_aggregate_id(agent_id), *encrypted, *clear}, key=str)
        if head is None and not encrypted and not clear:
            return []
        curs.execute(
            sql.SQL("SELECT notification_id, originator_id, originator_version, topic, state "
                    "FROM {} WHERE originator_id = ANY(%s) ORDER BY notification_id").format(events),
            (originators,),
        )
        return list(curs.fetchall())


def export_lines(app: Any, agent_id: str) -> Iterator[str]:
    """The export of ``agent_id`` line by line (no newline). ``AgentErasedError`` for an
    erased agent, ``NotFoundError`` for one never written; both before the first line."""
    uuid = agent_aggregate_id(agent_id)
    if app.keys.is_erased(uuid):
        raise AgentErasedError(f"agent {agent_id!r}")
    rows = _rows(app, agent_id)
    if not rows:
        raise NotFoundError(f"no agent {agent_id!r} in this memory")
    clear, digest = plain_mapper(app), hashlib.sha256()
    lines: list[str] = []
    for row in rows:
        event = app.mapper.to_domain_event(StoredEvent(
            row["originator_id"], row["originator_version"], row["topic"], bytes(row["state"])))
        if isinstance(event, UndecryptableEvent):  # erased while we read
            raise AgentErasedError(f"agent {agent_id!r}")
        state = json.loads(clear.to_stored_event(event).state)
        line = json.dumps({
            "kind": "event", "position": row["notification_id"],
            "originator_id": str(row["originator_id"]),
            "originator_version": row["originator_version"], "topic": row["topic"],
            "timestamp": event.timestamp.isoformat(), "state": state,
        }, ensure_ascii=False, sort_keys=True)
        digest.update(line.encode("utf-8") + b"\n")
        lines.append(line)
    yield json.dumps({"kind": "header", "format": FORMAT, "version": VERSION, "agent_id": agent_id,
                      "exported_at": datetime.now(UTC).isoformat(), "events": len(lines)})
    yield from lines
    yield json.dumps({"kind": "end", "events": len(lines), "sha256": digest.hexdigest()})
