"""Audit: how a memory came to be, answered from the event LOG (not from the read models).

- ``fact_history``: every decision that touched a fact and its lineage (what it superseded,
  what superseded it), with the message that caused each one and who decided. The versions
  to fetch come cheaply from ``mem_facts.event_versions`` when the read model is there (then
  exactly those events are read from the event store); otherwise the agent's events are
  scanned and folded with ``domain.fold``.
- ``agent_history``: all decisions of an agent in order (``engramdb history --agent A``).
- ``facts_as_of``: the agent's events replayed up to ``t`` through the reference fold.
- ``extraction_outputs``: what the LLM answered when it read a message (``raw_output`` of the
  message's latest ``Processed``/``Reprocessed``), for the inspector's lineage page.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from eventsourcing.persistence import StoredEvent
from psycopg import sql

from engramdb.domain.aggregate import AgentMemory, MessageRecord
from engramdb.domain.erasure import UndecryptableEvent
from engramdb.domain.fold import AsOfAxis, FactFold, FactRow
from engramdb.domain.fold import facts_as_of as fold_facts_as_of
from engramdb.domain.jobs import AgentJobs, agent_jobs_id
from engramdb.domain.keys import agent_aggregate_id, message_record_id
from engramdb.domain.time_range import check_instant
from engramdb.infra.pgsql import set_search_path
from engramdb.services.management.audit_models import FactSnapshot, HistoryEntry

_DECISION = {
    "Opened": "OPENED",
    "EntityRegistered": "ENTITY",
    "EntityAliased": "ALIAS",
    "EntitiesMerged": "MERGE",
    "RelationshipObserved": "RELATIONSHIP",
    "FactAdded": "ADD",
    "FactUpdated": "UPDATE",
    "FactConfirmed": "NOOP",
    "FactRetracted": "DELETE",
    "DecisionRejected": "REJECTED",
    "Forgotten": "FORGET",
    "Erased": "ERASE",
}


# ----- event -> entry ------------------------------------------------------------------


def to_entry(event: Any) -> HistoryEntry:
    name = type(event).__name__
    g = event.__dict__.get
    entry = HistoryEntry(
        version=event.originator_version,
        event=name,
        decision=_DECISION.get(name, name.upper()),
        recorded_at=event.timestamp,
        decided_by=dict(g("decided_by") or {}),
        message_id=g("message_id") or g("source_message_id"),
    )
    if name in ("FactAdded", "FactUpdated"):
        entry.fact_id, entry.text, entry.entity_key = g("fact_id"), g("text"), g("entity_key")
        entry.target_fact_id = g("supersedes_fact_id")
        entry.valid_at = g("valid_from")
        entry.detail = {
            k: g(k)
            for k in (
                "attribute_key", "category", "confidence", "linked_entities", "speaker",
                "source_message_ids",
            )
        }
    elif name == "FactConfirmed":
        entry.target_fact_id, entry.valid_at = g("fact_id"), g("confirmed_at")
    elif name == "FactRetracted":
        entry.target_fact_id, entry.valid_at = g("fact_id"), g("retracted_at")
        entry.reason = g("reason")
    elif name == "Forgotten":
        entry.valid_at, entry.reason = g("forgotten_at"), g("reason")
    elif name == "Erased":
        entry.valid_at = g("erased_at")
        entry.reason = "erased: the agent's data key was destroyed; earlier events are unreadable"
    elif name == "EntityRegistered":
        entry.entity_key, entry.text = g("entity_key"), g("display_name")
        entry.detail = {"entity_type": g("entity_type"), "aliases": g("aliases")}
    elif name == "EntityAliased":
        entry.entity_key, entry.text = g("entity_key"), g("alias")
    elif name == "EntitiesMerged":
        entry.entity_key, entry.target_entity_key = g("merged_key"), g("into_key")
        entry.reason = g("reason")
    elif name == "RelationshipObserved":
        entry.entity_key, entry.target_entity_key = g("source_key"), g("target_key")
        entry.text, entry.valid_at = g("relation_type"), g("observed_at")
    elif name == "DecisionRejected":
        entry.reason = g("reason")
        entry.detail = dict(g("decision") or {})
        entry.text = entry.detail.get("text")
    elif name == "Opened":
        entry.text = g("agent_id")
    return entry


def _attach_messages(app: Any, agent_id: str, entries: list[HistoryEntry]) -> None:
    texts: dict[str, str | None] = {}
    for entry in entries:
        mid = entry.message_id
        if mid is None:
            continue
        if mid not in texts:
            record = app.message_record(agent_id, mid)
            texts[mid] = record.text if record is not None else None
        entry.message_text = texts[mid]


def extraction_outputs(app: Any, agent_id: str, message_ids: list[str],
                       fact_id: str | None = None) -> dict[str, str]:
    """The recorded LLM output of each message's extraction, for the messages whose
    extractor recorded one (the rule-based extractor and stored-only turns record none).
    It lives only on the message's ``Processed``/``Reprocessed`` events, not in a read model,
    so each message costs one read of its own short stream. An erased agent's events do not
    decrypt and give nothing.

    Which extraction: the latest — unless ``fact_id`` is given and a later reprocess of the
    message ended that fact (``Reprocessed.ended_fact_ids``, ADR-0023): the fact then came
    from the extraction before that reprocess, and the lineage page must show what the LLM
    answered *then*, not what it answered since."""
    found: dict[str, str] = {}
    for mid in dict.fromkeys(message_ids):
        for event in app.events.get(message_record_id(agent_id, mid)):
            if not isinstance(event, MessageRecord.Processed | MessageRecord.Reprocessed):
                continue
            if fact_id is not None and fact_id in (getattr(event, "ended_fact_ids", None) or ()):
                break  # this reprocess ended the fact: the output before it is the fact's
            if event.raw_output:
                found[mid] = event.raw_output  # oldest first: the latest one wins
            else:
                found.pop(mid, None)
    return found


# ----- reading the log -----------------------------------------------------------------


def _events_at_versions(app: Any, agent_id: str, versions: list[int]) -> list[Any]:
    """Exactly the agent events at ``versions`` (one indexed query on the event store)."""
    recorder = app.recorder
    datastore = recorder.datastore
    table = sql.Identifier(datastore.schema, recorder.events_table_name)
    query = sql.SQL(
        "SELECT originator_id, originator_version, topic, state FROM {} "
        "WHERE originator_id = %s AND originator_version = ANY(%s) ORDER BY originator_version"
    ).format(table)
    with datastore.get_connection() as conn, conn.cursor() as curs:
        curs.execute(query, (agent_aggregate_id(agent_id), sorted(set(versions))))
        rows = curs.fetchall()
    return [
        app.mapper.to_domain_event(
            StoredEvent(
                originator_id=row["originator_id"],
                originator_version=row["originator_version"],
                topic=row["topic"],
                state=bytes(row["state"]),
            )
        )
        for row in rows
    ]


def _lineage_from_read_model(app: Any, agent_id: str, fact_id: str) -> list[int] | None:
    """Versions of the fact and its supersession chain from ``mem_facts``; None if absent."""
    datastore = app.recorder.datastore
    try:
        with datastore.transaction(commit=False) as curs:
            set_search_path(curs, datastore.schema)
            curs.execute("SELECT to_regclass('mem_facts') IS NOT NULL AS ok")
            row = curs.fetchone()
            if row is None or not row["ok"]:
                return None
            curs.execute(
                "WITH RECURSIVE chain(fid) AS (SELECT %(f)s::text UNION "
                "SELECT unnest(ARRAY[m.supersedes_fact_id, m.superseded_by]) FROM mem_facts m "
                "JOIN chain c ON m.agent_id = %(a)s AND m.fact_id = c.fid) "
                "SELECT event_versions FROM mem_facts WHERE agent_id = %(a)s "
                "AND fact_id IN (SELECT fid FROM chain WHERE fid IS NOT NULL)",
                {"a": agent_id, "f": fact_id},
            )
            rows = curs.fetchall()
    except Exception:  # noqa: BLE001 - the read model is optional here
        return None
    if not rows:
        return None
    return sorted({v for r in rows for v in r["event_versions"]})


def _lineage_from_fold(rows: dict[tuple[str, str], FactRow], agent_id: str, fact_id: str) -> list[int]:
    seen: set[str] = set()
    todo = [fact_id]
    versions: set[int] = set()
    while todo:
        fid = todo.pop()
        if fid in seen:
            continue
        seen.add(fid)
        row = rows.get((agent_id, fid))
        if row is None:
            continue
        versions.update(row.event_versions)
        todo.extend(x for x in (row.supersedes_fact_id, row.superseded_by) if x)
    return sorted(versions)


def fact_history(
    app: Any,
    agent_id: str,
    fact_id: str,
    *,
    lineage: bool = True,
    with_messages: bool = True,
) -> list[HistoryEntry]:
    """Decisions that touched ``fact_id`` (and, with ``lineage``, the facts it superseded or
    was superseded by), oldest first. Empty if the agent never had that fact."""
    versions = _lineage_from_read_model(app, agent_id, fact_id) if lineage else None
    if versions is not None:
        events = _events_at_versions(app, agent_id, versions)
    else:
        all_events = app.agent_events(agent_id)
        folded = FactFold(agent_id).apply_all(all_events)
        if lineage:
            wanted = set(_lineage_from_fold(folded.rows, agent_id, fact_id))
        else:
            row = folded.rows.get((agent_id, fact_id))
            wanted = set(row.event_versions) if row else set()
        events = [e for e in all_events if e.originator_version in wanted]
    entries = [to_entry(e) for e in events if not isinstance(e, UndecryptableEvent)]
    if entries:
        touched = {fact_id} | {f for e in entries for f in (e.fact_id, e.target_fact_id) if f}
        entries.extend(_job_entries(app, agent_id, touched))
        entries.sort(key=lambda e: e.recorded_at)  # stable: the agent's own order is kept
    if with_messages:
        _attach_messages(app, agent_id, entries)
    return entries


def _job_entries(app: Any, agent_id: str, fact_ids: set[str]) -> list[HistoryEntry]:
    """Job conclusions about these facts (``FactVitalityAssessed``, ADR-0022) from the
    agent's ``AgentJobs`` log; ``version`` is that aggregate's, ``detail.aggregate`` says so."""
    entries: list[HistoryEntry] = []
    for e in app.events.get(agent_jobs_id(agent_id)):
        if not isinstance(e, AgentJobs.FactVitalityAssessed):
            continue
        low = set(e.low)
        for fid in sorted(fact_ids & set(e.facts)):
            entries.append(HistoryEntry(
                version=e.originator_version, event="FactVitalityAssessed", decision="VITALITY",
                fact_id=fid, recorded_at=e.timestamp, valid_at=e.reference_time,
                reason="low vitality: a candidate for consolidation (not deleted)"
                if fid in low else None,
                detail={"aggregate": "jobs", "vitality": e.facts[fid], "low": fid in low,
                        "method": e.method},
            ))
    return entries


def agent_history(
    app: Any,
    agent_id: str,
    *,
    with_messages: bool = False,
    since_version: int | None = None,
    limit: int | None = None,
) -> list[HistoryEntry]:
    """Every decision of the agent in log order (``since_version`` exclusive)."""
    kwargs: dict[str, Any] = {}
    if since_version is not None:
        kwargs["gt"] = since_version
    if limit is not None:
        kwargs["limit"] = limit
    # an erased agent's events are unreadable: its history is the ``Erased`` marker (ERASE)
    entries = [
        to_entry(e)
        for e in app.agent_events(agent_id, **kwargs)
        if not isinstance(e, UndecryptableEvent)
    ]
    if with_messages:
        _attach_messages(app, agent_id, entries)
    return entries


def facts_as_of(
    app: Any, agent_id: str, t: datetime, axis: AsOfAxis = "both"
) -> list[FactSnapshot]:
    """Facts valid at ``t`` as memory knew them at ``t`` (see ``domain.fold.facts_as_of``).
    ``t`` outside ``domain.time_range``'s window is a ``ValueError`` naming ``as_of``."""
    t = check_instant(t, "as_of")
    events = [e for e in app.agent_events(agent_id) if isinstance(e, AgentMemory.Event)]
    return [
        FactSnapshot.from_row(row)
        for row in fold_facts_as_of(events, t, agent_id=agent_id, axis=axis)
    ]
