"""Leases between processes: PostgreSQL session-level advisory locks on one dedicated connection.

Why advisory locks: every engramdb process already talks to the one PostgreSQL, a session lock
needs no table, no clock and no heartbeat rows, and it is released by the server the moment the
holder's session ends — a ``kill -9``, a crashed host (after TCP keepalive), or a closed
connection. So "exactly one runner per projection" and "exactly one consumer per ingest
partition" (ADR-0020) are one ``pg_try_advisory_lock`` each, and a standby takes over by trying
again.

Keys are the two-``int4`` form ``(namespace, object)``: the namespace is a hash of what is being
elected (purpose, schema, subject prefix), so two deployments on one server (different schemas)
never contend, and ``pg_locks`` can count the holders of one namespace (``holders``: how many
ingest processes are alive, for spreading partitions).

The connection is used only for locks: if it breaks, every lease it held is gone (the server
released them), ``held`` becomes empty at the next ``check`` and the owners must stop what
those leases guarded. ``check`` pings at most every ``ping_every`` seconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import psycopg

log = logging.getLogger(__name__)

T = TypeVar("T")
PING_EVERY = 1.0  # seconds between liveness pings of the lease connection


def namespace(*parts: str) -> int:
    """A positive ``int4`` naming one election domain (stable across processes)."""
    digest = hashlib.sha256("\0".join(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def object_key(name: str) -> int:
    return namespace("object", name)


class AdvisoryLocks:
    """Session advisory locks held on one dedicated autocommit connection (thread-safe)."""

    def __init__(self, conninfo: str, application_name: str = "engramdb-leases",
                 ping_every: float = PING_EVERY, connect_timeout: float = 5.0) -> None:
        self.conninfo = conninfo
        self.application_name = application_name
        self.ping_every = ping_every
        self.connect_timeout = connect_timeout
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._held: set[tuple[int, int]] = set()
        self._lock = threading.RLock()
        self._last_ping = 0.0

    # ----- connection --------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._conn is None or self._conn.closed:
            self._held.clear()  # a new session holds nothing
            self._conn = psycopg.connect(
                self.conninfo, autocommit=True, connect_timeout=int(self.connect_timeout),
                application_name=self.application_name,
                # a dead peer is noticed by the server within ~15 s, releasing our locks
                keepalives=1, keepalives_idle=5, keepalives_interval=2, keepalives_count=3,
            )
            self._last_ping = time.monotonic()
        return self._conn

    def _lost(self, error: BaseException) -> None:
        if self._held:
            log.warning("lease connection lost (%s: %s): %d lease(s) released",
                        type(error).__name__, error, len(self._held))
        self._held.clear()
        if self._conn is not None:
            with contextlib.suppress(Exception):  # it is broken anyway
                self._conn.close()
        self._conn = None

    def check(self) -> set[tuple[int, int]]:
        """The leases still held (pings the connection at most every ``ping_every`` s)."""
        with self._lock:
            if self._conn is not None and time.monotonic() - self._last_ping >= self.ping_every:
                try:
                    self._conn.execute("SELECT 1")
                    self._last_ping = time.monotonic()
                except Exception as exc:  # noqa: BLE001 - the session (and its locks) is gone
                    self._lost(exc)
            return set(self._held)

    # ----- leases ------------------------------------------------------------------------

    def try_acquire(self, ns: int, obj: int) -> bool:
        """Take lease ``(ns, obj)`` if nobody holds it; True if this process holds it now.
        Connection errors propagate (the caller retries later)."""
        with self._lock:
            if (ns, obj) in self._held:
                # a runner restarted after a database crash asks again: the server may have
                # released everything with the old session, so make sure it is still alive
                self._last_ping = 0.0
                if (ns, obj) in self.check():
                    return True
            try:
                row = self._connection().execute(
                    "SELECT pg_try_advisory_lock(%s, %s)", (ns, obj)
                ).fetchone()
            except psycopg.OperationalError as exc:
                self._lost(exc)
                raise
            if row is not None and row[0]:
                self._held.add((ns, obj))
                return True
            return False

    def release(self, ns: int, obj: int) -> None:
        with self._lock:
            if (ns, obj) not in self._held:
                return
            self._held.discard((ns, obj))
            try:
                self._connection().execute("SELECT pg_advisory_unlock(%s, %s)", (ns, obj))
            except Exception as exc:  # noqa: BLE001 - a dead session released it already
                self._lost(exc)

    def holds(self, ns: int, obj: int) -> bool:
        with self._lock:
            return (ns, obj) in self._held

    def holders(self, ns: int) -> int:
        """How many leases of namespace ``ns`` are held right now, by any session."""
        with self._lock:
            try:
                row = self._connection().execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                    " AND objsubid = 2 AND classid = %s::oid"
                    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                    (ns,),
                ).fetchone()
            except psycopg.OperationalError as exc:
                self._lost(exc)
                raise
            return int(str(row[0])) if row is not None else 0

    def run(self, fn: Callable[[psycopg.Connection[tuple[object, ...]]], T]) -> T:
        """``fn(connection)`` under the lock: a short read on the lease connection (e.g. the
        tracking positions a standby waits on), so a standby needs no pool of its own."""
        with self._lock:
            try:
                return fn(self._connection())
            except psycopg.OperationalError as exc:
                self._lost(exc)
                raise

    def close(self) -> None:
        """Release everything (closing the session releases the locks)."""
        with self._lock:
            self._held.clear()
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.close()
            self._conn = None


def lease_holder(conn: psycopg.Connection[tuple[object, ...]], ns: int, obj: int) -> str | None:
    """The ``application_name`` of the session holding lease ``(ns, obj)`` (None: free) — for
    status output: holders name themselves (e.g. host:pid) when they open their lease session."""
    row = conn.execute(
        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
        " WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2"
        " AND l.classid = %s::oid AND l.objid = %s::oid"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        (ns, obj),
    ).fetchone()
    return None if row is None else str(row[0])


@contextlib.contextmanager
def exclusive(conninfo: str, *parts: str, timeout: float = 120.0) -> Iterator[None]:
    """One process at a time in the block (a blocking advisory lock on its own connection).

    For first-run DDL: PostgreSQL's ``CREATE TABLE/TYPE IF NOT EXISTS`` is not safe against a
    concurrent twin (``type "engramdb_events" already exists`` when three ``serve`` processes
    start on a fresh schema), so opening a memory creates its tables under this lock."""
    ns = namespace("exclusive", *parts)
    with psycopg.connect(conninfo, autocommit=True, application_name="engramdb-setup") as conn:
        conn.execute(f"SET lock_timeout = '{int(timeout * 1000)}ms'")
        conn.execute("SELECT pg_advisory_lock(%s, 0)", (ns,))
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                conn.execute("SELECT pg_advisory_unlock(%s, 0)", (ns,))
