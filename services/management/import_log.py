"""``engramdb import``: replay an ``engramdb-export`` file into this memory (ADR-0049).

Why it is safe to run twice, or on a file someone edited:
- **Everything is checked before anything is written**, line by line, and a refusal names the
  line: JSON, the header (format, version, agent), every event's fields, its topic (only the
  classes of ``engramdb.domain`` — a topic names a module to import, and the file is
  untrusted), its state (decoded by the library's transcoder into the event class), that every
  aggregate belongs to the header's agent and its versions run 1, 2, 3…, the end line's count
  and SHA-256 (a truncated or edited file is refused).
- **All or nothing per agent**: the events the target lacks are inserted in ONE
  ``insert_events`` (one transaction). Events the target already holds (same aggregate and
  version) are compared by topic and skipped, so importing twice inserts nothing, and an
  import that died mid-way (it cannot: one transaction) would resume. An aggregate the target
  holds with another history is a conflict: nothing is written.
- **Ids, times and provenance are kept**: each event is the exported one, re-encrypted under
  the target's key for the agent. Positions are the target's (a log position is per store).
  The import itself is recorded (``engramdb_imports``: agent, file digest, when), which is
  how an imported agent is told from a native one without touching its events.
- Read models follow by themselves: the projectors read the new events like any others, and
  never call an LLM or embedder the log already answered.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import resolve_topic
from psycopg import sql
from pydantic import BaseModel

from engramdb.domain.keys import agent_aggregate_id
from engramdb.services.management.export_log import FORMAT, VERSION, plain_mapper

_TOPIC_MODULES = ("engramdb.domain.", "domain.")  # the second: topics before ADR-0007


class ImportRefused(ValueError):
    """A file that cannot be imported; ``line`` is its 1-based line number (0: the file)."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}" if line else reason)
        self.line = line
        self.reason = reason


class ImportResult(BaseModel):
    agent_id: str
    events: int
    inserted: int
    already_present: int
    position: int


def _json(number: int, line: str) -> dict[str, Any]:
    try:
        item = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ImportRefused(number, f"not JSON ({exc})") from None
    if not isinstance(item, dict):
        raise ImportRefused(number, "a line is a JSON object")
    return item


def _header(number: int, item: dict[str, Any]) -> str:
    if item.get("kind") != "header" or item.get("format") != FORMAT:
        raise ImportRefused(number, f"the first line is the {FORMAT} header")
    if item.get("version") != VERSION:
        raise ImportRefused(number, f"format version {item.get('version')!r}; this engramdb reads {VERSION}")
    agent = item.get("agent_id")
    if not isinstance(agent, str) or not agent:
        raise ImportRefused(number, "the header names no agent_id")
    return agent


def _event(app: Any, number: int, item: dict[str, Any]) -> Any:
    try:
        oid, version = UUID(str(item["originator_id"])), item["originator_version"]
        topic, state = item["topic"], item["state"]
    except (KeyError, ValueError) as exc:
        raise ImportRefused(number, f"an event line needs originator_id, originator_version, "
                                    f"topic and state ({exc})") from None
    if not isinstance(version, int) or version < 1 or not isinstance(topic, str):
        raise ImportRefused(number, "originator_version is a positive integer, topic a string")
    if not topic.startswith(_TOPIC_MODULES) or ":" not in topic:
        raise ImportRefused(number, f"topic {topic:.80} is not an engramdb event")
    try:
        resolve_topic(topic)
        raw = json.dumps(state, ensure_ascii=False).encode("utf-8")
        return plain_mapper(app).to_domain_event(StoredEvent(oid, version, topic, raw))
    except Exception as exc:  # noqa: BLE001 — any decoding failure is the file's
        raise ImportRefused(number, f"event state does not decode ({type(exc).__name__}: {exc})") from None


def parse_export(app: Any, lines: Iterable[str]) -> tuple[str, list[Any], str]:
    """(agent id, domain events in file order, file digest), or ``ImportRefused``."""
    agent, events, end = None, [], None
    digest, whole = hashlib.sha256(), hashlib.sha256()
    number = 0
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\n")
        whole.update(line.encode("utf-8") + b"\n")
        if not line.strip():
            continue
        if end is not None:
            raise ImportRefused(number, "text after the end line")
        item = _json(number, line)
        if agent is None:
            agent = _header(number, item)
        elif item.get("kind") == "event":
            digest.update(line.encode("utf-8") + b"\n")
            events.append((number, _event(app, number, item)))
        elif item.get("kind") == "end":
            end = (number, item)
        else:
            raise ImportRefused(number, f"unknown line kind {item.get('kind')!r}")
    if agent is None:
        raise ImportRefused(0, "the file is empty")
    if end is None:
        raise ImportRefused(number, "the file ends without its end line (truncated?)")
    if end[1].get("events") != len(events) or end[1].get("sha256") != digest.hexdigest():
        raise ImportRefused(end[0], "the end line's count or sha256 does not match the events")
    _check_ownership(agent, events)
    return agent, [e for _n, e in events], whole.hexdigest()


def _check_ownership(agent: str, events: list[tuple[int, Any]]) -> None:
    """Every aggregate is the agent's (its own, or one whose first event names the agent) and
    its versions run 1, 2, 3… in the file."""
    own, seen = agent_aggregate_id(agent), dict[UUID, int]()
    for number, event in events:
        oid, version = event.originator_id, event.originator_version
        if version != seen.get(oid, 0) + 1:
            raise ImportRefused(number, f"aggregate {oid} jumps to version {version}")
        if version == 1 and oid != own and getattr(event, "agent_id", None) != agent:
            raise ImportRefused(number, f"aggregate {oid} is not agent {agent!r}'s")
        seen[oid] = version


def _present(app: Any, oids: list[UUID]) -> dict[tuple[UUID, int], str]:
    table = sql.Identifier(app.recorder.datastore.schema, app.recorder.events_table_name)
    with app.recorder.datastore.transaction(commit=False) as curs:
        curs.execute(sql.SQL("SELECT originator_id, originator_version, topic FROM {} "
                             "WHERE originator_id = ANY(%s)").format(table), (oids,))
        return {(r["originator_id"], r["originator_version"]): r["topic"] for r in curs.fetchall()}


def _ledger(app: Any, agent: str, digest: str, inserted: int) -> None:
    schema = app.recorder.datastore.schema
    with app.recorder.datastore.transaction(commit=True) as curs:
        curs.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (agent_id text NOT NULL, sha256 text NOT NULL, "
            "imported_at timestamptz NOT NULL DEFAULT now(), events_inserted int NOT NULL, "
            "PRIMARY KEY (agent_id, sha256))").format(sql.Identifier(schema, "engramdb_imports")))
        curs.execute(sql.SQL("INSERT INTO {} (agent_id, sha256, events_inserted) VALUES (%s, %s, %s) "
                             "ON CONFLICT DO NOTHING").format(
            sql.Identifier(schema, "engramdb_imports")), (agent, digest, inserted))


def import_export(app: Any, lines: Iterable[str]) -> ImportResult:
    """Check the whole file, then insert what this memory lacks in one transaction."""
    from engramdb.domain.erasure import AgentErasedError

    agent, events, digest = parse_export(app, lines)
    if app.keys.is_erased(agent_aggregate_id(agent)):
        raise AgentErasedError(f"agent {agent!r}")
    present = _present(app, sorted({e.originator_id for e in events}, key=str))
    missing = []
    for event in events:
        key = (event.originator_id, event.originator_version)
        stored = app.mapper.to_stored_event(event)
        if key in present:
            if present[key] != stored.topic:
                raise ImportRefused(0, f"agent {agent!r} already has another history "
                                       f"(aggregate {key[0]} version {key[1]}); nothing imported")
            continue
        missing.append(stored)
    ids = app.recorder.insert_events(missing) if missing else None
    app.forget_cached(*{e.originator_id for e in events})
    _ledger(app, agent, digest, len(missing))
    return ImportResult(agent_id=agent, events=len(events), inserted=len(missing),
                        already_present=len(events) - len(missing),
                        position=int(ids[-1]) if ids else 0)
