"""The event log read for a rebuild: stored rows straight from the events table, in pages of a
server-side cursor fetched by a thread one page ahead, decoded by ``infra.bulk_decode``, and
optionally only one *group* of agents at a time (ADR-0032).

Why not ``recorder.select_notifications``: each page was a new query (``notification_id >
last … LIMIT n``) building a ``Notification`` per row, then the mapper copied it again to
decrypt; here one cursor streams the five columns the decoder needs.

Why groups: a rebuild holds its folded rows until they are loaded, so memory grew with the
read model (≈ 2 MB per 1,000 facts). Every event of an agent — its ``AgentMemory`` and
``AgentJobs`` events and its message records — is encrypted under the agent's key, whose id
(the agent aggregate's id) is stored in clear in the state's header (``infra.crypto_mapper``).
A rebuild counts the events per last byte of that id (one SQL scan) and packs the bytes into
groups of a given size (``LogStream.plan``; the rebuild's: at most 50,000 events, at least
four groups per log, ADR-0036); PostgreSQL filters on the same byte, so a
pass receives only its group's events (and every clear event: those are rare — written before
encryption, or the ``Erased`` marker — and attributed here after decoding). Agents never share a row, so the folds of disjoint groups are disjoint parts of the read model:
a rebuild folds and loads one group, frees it, and reads the next, and memory is bounded by
the largest group, not the whole model.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from engramdb.domain.aggregate import AgentMemory
from engramdb.domain.keys import agent_aggregate_id
from engramdb.infra.bulk_decode import BulkDecoder
from engramdb.infra.crypto_mapper import MAGIC

PAGE_SIZE = 5000
_KEY_LAST_BYTE = len(MAGIC) + 15  # the last byte of the key id in an encrypted state


def group_of(key_id: bytes | UUID, groups: int) -> int:
    """The group of an agent key id (the agent aggregate's id); the SQL filter computes the
    same from the stored state's header."""
    raw = key_id.bytes if isinstance(key_id, UUID) else key_id
    return raw[15] % groups


def _pages(conninfo: str, query: sql.Composed, params: dict[str, Any],
           page_size: int) -> Iterator[list[tuple[Any, ...]]]:
    """Rows of ``query`` in pages of a server-side cursor; a thread fetches the next page
    while the caller decodes and folds this one (it waits on the socket with the GIL
    released). At most three pages are in memory."""
    pages: queue.Queue[Any] = queue.Queue(maxsize=2)
    done = object()
    stop = threading.Event()

    def fetch() -> None:
        try:
            with psycopg.connect(conninfo, application_name="engramdb-rebuild-read") as conn, \
                    conn.transaction(), conn.cursor("engramdb_rebuild_log", binary=True) as cur:
                cur.itersize = page_size
                cur.execute(query, params)
                while not stop.is_set() and (page := cur.fetchmany(page_size)):
                    pages.put(page)
            pages.put(done)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            pages.put(exc)

    reader = threading.Thread(target=fetch, name="rebuild-reader", daemon=True)
    reader.start()
    try:
        while (item := pages.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while reader.is_alive():  # unblock a reader waiting on a full queue
            with contextlib.suppress(queue.Empty):
                pages.get(timeout=0.05)
        reader.join()


class LogStream:
    """Decoded events of the log up to ``stop``, all of them or one group's."""

    def __init__(self, app: Any, conninfo: str, stop: int, page_size: int = PAGE_SIZE) -> None:
        recorder = app.recorder
        self.conninfo = conninfo
        self.stop = stop
        self.page_size = page_size
        self.table = sql.Identifier(recorder.datastore.schema, recorder.events_table_name)
        self.decoder = BulkDecoder(app.mapper)
        self.mapper = app.mapper
        self._owners: dict[UUID, UUID] = {}  # clear events: originator -> agent key id

    def plan(self, group_events: int) -> list[frozenset[int] | None]:
        """Groups for a rebuild to fold one after the other, each about ``group_events``
        events: the key-id bytes of each group (``None``: the whole log, one pass). The
        events per key byte are counted in SQL (one scan), then packed first-fit
        decreasing — a hash modulo the group count put 4 of 20 agents in one group at 1M
        events. A group is never smaller than one key byte's events (about one agent's when
        agents are few)."""
        if self.stop <= group_events or group_events <= 0:
            return [None]
        query = sql.SQL(
            "SELECT get_byte(state, {at}), count(*) FROM {} WHERE notification_id <= %(stop)s "
            "AND substring(state from 1 for {n}) = %(magic)s GROUP BY 1").format(
            self.table, at=sql.Literal(_KEY_LAST_BYTE), n=sql.Literal(len(MAGIC)))
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            counts = conn.execute(query, {"stop": self.stop, "magic": MAGIC}).fetchall()
        bins: list[tuple[int, set[int]]] = []
        for key_byte, n in sorted(counts, key=lambda r: (-r[1], r[0])):
            for i, (size, members) in enumerate(bins):
                if size + n <= group_events:
                    members.add(key_byte)
                    bins[i] = (size + n, members)
                    break
            else:
                bins.append((n, {key_byte}))
        return [frozenset(members) for _, members in bins] or [None]

    def pages(self, groups: int = 1, group: int = 0) -> Iterator[list[Any]]:
        """Pages of domain events in notification order (``groups`` > 1: the agents whose
        ``group_of`` is ``group``)."""
        if groups <= 1:
            return self.group_pages(None)
        return self.group_pages(frozenset(b for b in range(256) if b % groups == group))

    def group_pages(self, key_bytes: frozenset[int] | None) -> Iterator[list[Any]]:
        """Pages of domain events in notification order: all of them (``None``), or those of
        the agents whose key id ends in one of ``key_bytes``."""
        columns = sql.SQL(
            "SELECT originator_id, originator_version, topic, state FROM {} "
            "WHERE notification_id <= %(stop)s").format(self.table)
        params: dict[str, Any] = {"stop": self.stop, "magic": MAGIC}
        if key_bytes is not None:
            columns += sql.SQL(
                " AND (substring(state from 1 for {n}) <> %(magic)s "
                "OR get_byte(state, {at}) = ANY(%(bytes)s))").format(
                n=sql.Literal(len(MAGIC)), at=sql.Literal(_KEY_LAST_BYTE))
            params.update(bytes=sorted(key_bytes))
        query = columns + sql.SQL(" ORDER BY notification_id")
        decode = self.decoder.decode
        for rows in _pages(self.conninfo, query, params, self.page_size):
            events = [decode(oid, version, topic, state) for oid, version, topic, state in rows]
            if key_bytes is not None:
                events = [e for (_, _, _, state), e in zip(rows, events, strict=True)
                          if state[:len(MAGIC)] == MAGIC or self._clear_key(e)[15] in key_bytes]
            yield events

    def _clear_key(self, event: Any) -> bytes:
        """The agent key id of an event stored in clear, as the mapper would key it."""
        agent_id = event.__dict__.get("agent_id")
        oid = event.originator_id
        owner: UUID | None
        if isinstance(agent_id, str):
            owner = agent_aggregate_id(agent_id)
        elif isinstance(event, AgentMemory.Event):
            owner = oid
        else:  # a message record's later event: its first event names the agent
            owner = self._owners.get(oid) or self.mapper._owner_from_log(oid) or oid
        self._owners[oid] = owner
        return owner.bytes
