"""Erasing an agent: crypto-shredding on an immutable log (issue 11 item 3, ADR-0018).

``erase_agent`` makes everything of agent A unreadable and removes every derived copy, while
the log keeps its structure (every event keeps its id, version, topic and notification id):

1. append ``AgentMemory.Erased`` to A's stream — in clear, no personal data (agent id, when,
   who asked) — so audit can say "erased" and every projector, in log order, drops A's rows
   and this process's key (``AgentCipherMapper``);
2. in one transaction: destroy A's data key (``engramdb_data_keys.data_key = NULL``), delete
   A's snapshots, overwrite the state of A's events stored in clear before encryption
   existed (they have no key to destroy; structure kept, payload gone); then, in another,
   delete A's rows in every read model with their cached vectors (``projections.erasure``);
3. evict A's aggregates from this process's cache.

Idempotent: erasing again re-runs step 2 (a crash between 1 and 2 is finished by a re-run)
and appends no second marker. Writes for A are refused from then on (``AgentErasedError``).

The facade then makes it reach the disk and NATS (ADR-0051): ``erase_disk`` rewrites every
table that held A's rows, ``erase_streams`` deletes A's turns and dead letters. Not covered
(README "Erasure"): backups and ``pg_dump`` files taken before, the PostgreSQL WAL and its
archives, freed filesystem blocks, logs, and clients' own copies.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import OperationalError, RecordConflictError
from eventsourcing.utils import get_topic
from psycopg import sql

from engramdb.domain.aggregate import AgentMemory
from engramdb.domain.keys import agent_aggregate_id
from engramdb.infra.crypto_mapper import MAGIC
from engramdb.infra.pgsql import set_search_path
from engramdb.projections.erasure import drop_agent_rows
from engramdb.projections.read_models import READ_MODELS
from engramdb.services.management.models import EraseResult, NotFoundError
from engramdb.services.write.pipeline import WritePipeline

_JSON_OBJECT = 123  # first byte of a state stored in clear: '{'


def _head_and_originators(curs: Any, events: sql.Composable, agent_id: str) -> tuple[
    int | None, list[UUID], list[UUID]
]:
    """A's stream head, the originators encrypted under A's key, and A's originators whose
    first event was stored in clear (before encryption): their states name A."""
    key_id = agent_aggregate_id(agent_id)
    curs.execute(
        sql.SQL("SELECT max(originator_version) AS v FROM {} WHERE originator_id = %s").format(
            events
        ),
        (key_id,),
    )
    row = curs.fetchone()
    head = row["v"] if row else None
    curs.execute(
        sql.SQL(
            "SELECT DISTINCT originator_id FROM {} WHERE substring(state from 1 for %s) = %s"
        ).format(events),
        (len(MAGIC) + 16, MAGIC + key_id.bytes),
    )
    encrypted = [r["originator_id"] for r in curs.fetchall()]
    curs.execute(
        sql.SQL(
            "SELECT originator_id FROM {} WHERE originator_version = 1 "
            "AND get_byte(state, 0) = %s "
            "AND convert_from(state, 'UTF8')::jsonb ->> 'agent_id' = %s"
        ).format(events),
        (_JSON_OBJECT, agent_id),
    )
    clear = [r["originator_id"] for r in curs.fetchall()]
    return head, encrypted, clear


def _append_marker(
    app: Any, agent_id: str, head: int | None, decided_by: dict[str, Any]
) -> int:
    """Append ``Erased`` after A's last event (re-reading the head on a conflict)."""
    events = sql.Identifier(app.recorder.datastore.schema, app.recorder.events_table_name)
    for attempt in range(5):
        now = datetime.now(UTC)
        marker = AgentMemory.Erased(  # type: ignore[call-arg]
            originator_id=agent_aggregate_id(agent_id),
            originator_version=(head or 0) + 1,
            timestamp=now,
            agent_id=agent_id,
            erased_at=now,
            decided_by=decided_by,
        )
        try:
            ids = app.recorder.insert_events([app.mapper.to_stored_event(marker)])
            return int(ids[-1]) if ids else 0
        except RecordConflictError:
            time.sleep(0.05 * (attempt + 1))
            with app.recorder.datastore.transaction(commit=False) as curs:
                head, _, _ = _head_and_originators(curs, events, agent_id)
    raise RecordConflictError(f"agent {agent_id!r} kept changing; try the erasure again")


def _drop_read_models(datastore: Any, agent_id: str) -> int:
    """Every read model's rows of the agent, in their own transaction (the key is already
    gone). Projectors handling the marker delete the same rows concurrently; the shared lock
    order makes that a wait, and a deadlock with a projector's earlier updates is retried."""
    tables = [t for rm in READ_MODELS for t in rm.tables]
    for attempt in range(5):
        try:
            with datastore.transaction(commit=True) as curs:
                set_search_path(curs, datastore.schema)
                return drop_agent_rows(curs, agent_id, tables)
        except OperationalError:
            if attempt == 4:
                raise
            time.sleep(0.05 * (attempt + 1))
    return 0  # pragma: no cover — the loop returns or raises


def erase_agent(pipeline: WritePipeline, agent_id: str, actor: str, via: str) -> EraseResult:
    """Crypto-shred ``agent_id`` (see the module doc). ``NotFoundError`` if it has no events."""
    app: Any = pipeline.app  # recorder attributes of the PostgreSQL recorder
    datastore = app.recorder.datastore
    events = sql.Identifier(datastore.schema, app.recorder.events_table_name)
    key_id = agent_aggregate_id(agent_id)
    with pipeline.agent_lock(agent_id):
        with datastore.transaction(commit=False) as curs:
            head, encrypted, clear = _head_and_originators(curs, events, agent_id)
        if head is None and not encrypted and not clear:
            raise NotFoundError(f"agent {agent_id!r} has no memory")
        already = app.keys.is_erased(key_id)
        position = 0
        if not already:
            position = _append_marker(
                app, agent_id, head, {"by": "user", "actor": actor, "via": via}
            )
        with datastore.transaction(commit=True) as curs:
            app.keys.destroy(curs, key_id)
            if app.snapshots is not None:
                snapshots = sql.Identifier(
                    datastore.schema, app.snapshots.recorder.events_table_name
                )
                curs.execute(
                    sql.SQL("DELETE FROM {} WHERE originator_id = ANY(%s)").format(snapshots),
                    ([key_id, *encrypted, *clear],),
                )
            # states stored in clear before encryption: overwrite with an unreadable stub
            # (same key id, no ciphertext), so they read as erased like the rest
            curs.execute(
                sql.SQL(
                    "UPDATE {} SET state = %s WHERE originator_id = ANY(%s) "
                    "AND get_byte(state, 0) = %s AND topic <> %s"
                ).format(events),
                (MAGIC + key_id.bytes, [key_id, *clear], _JSON_OBJECT,
                 get_topic(AgentMemory.Erased)),
            )
            scrubbed = max(curs.rowcount, 0)
        rows = _drop_read_models(datastore, agent_id)
        app.forget_cached(key_id, *encrypted, *clear)
    return EraseResult(
        agent_id=agent_id,
        already_erased=already,
        aggregates=len({key_id, *encrypted, *clear}),
        clear_events_scrubbed=scrubbed,
        read_model_rows_deleted=rows,
        position=position,
    )
