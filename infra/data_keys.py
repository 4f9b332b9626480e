"""Per-agent data keys: their table, their in-process cache, and their destruction.

Crypto-shredding (ADR-0018) needs keys that live apart from the events they protect: an
event log cannot forget, but a key row can. ``engramdb_data_keys`` sits in the same database
and schema as the event tables (one backup unit, one transaction for erase's bookkeeping)
and holds one random 256-bit AES-GCM key per agent, keyed by the agent aggregate's id (a
hash of the agent id; the table never holds the agent id itself).

A row is created on the agent's first event. Erasing sets ``data_key`` to NULL and stamps
``erased_at``: the row stays, so a later write for that agent is refused instead of silently
getting a fresh key under which new and old events would mix.

Why a process-wide cache keyed by (database, schema): every ``EventLog`` in a process
(the write path's and one per projector) has its own mapper, yet they must agree that a key
is gone as soon as any of them reads the ``Erased`` marker (``forget``). Looking a key up is
one indexed query per agent per process; afterwards encryption costs only AES-GCM.
"""

from __future__ import annotations

import os
import threading
from typing import Any
from uuid import UUID

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from psycopg import sql

from engramdb.domain.erasure import AgentErasedError

TABLE = "engramdb_data_keys"
_DDL_LOCK_KEY = 0x656E6772616D18  # serialises CREATE TABLE IF NOT EXISTS across processes
_ERASED = object()  # cache marker: the key row says erased


class DataKeys:
    """The key table of one database/schema, behind a cache shared by this process."""

    _caches: dict[str, dict[UUID, Any]] = {}
    _caches_lock = threading.Lock()

    def __init__(self, datastore: Any) -> None:
        self.datastore = datastore
        self.table = sql.Identifier(datastore.schema, TABLE)
        where = f"{getattr(datastore.pool, 'conninfo', '')}|{datastore.schema}"
        with DataKeys._caches_lock:
            self._cache = DataKeys._caches.setdefault(where, {})
        self._lock = threading.Lock()

    def create_table(self) -> None:
        with self.datastore.transaction(commit=True) as curs:
            curs.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK_KEY,))
            curs.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (key_id uuid PRIMARY KEY, data_key bytea, "
                    "created_at timestamptz NOT NULL DEFAULT now(), erased_at timestamptz)"
                ).format(self.table)
            )

    # ----- lookups ---------------------------------------------------------------------

    def for_write(self, key_id: UUID, what: str | None = None) -> AESGCM:
        """The agent's key, created on its first event; ``AgentErasedError`` once erased
        (``what`` names the agent in that error, when the caller knows it)."""
        what = what or f"the agent of aggregate {key_id}"
        cached = self._cache.get(key_id)
        if isinstance(cached, AESGCM):
            return cached
        if cached is _ERASED:
            raise AgentErasedError(what)
        with self._lock:
            with self.datastore.transaction(commit=True) as curs:
                curs.execute(
                    sql.SQL(
                        "INSERT INTO {} (key_id, data_key) VALUES (%s, %s) "
                        "ON CONFLICT (key_id) DO NOTHING"
                    ).format(self.table),
                    (key_id, AESGCM.generate_key(bit_length=256)),
                )
            key = self._load(key_id)
        if key is None:
            raise AgentErasedError(what)
        return key

    def for_read(self, key_id: UUID) -> AESGCM | None:
        """The agent's key, or None when it was destroyed (or never existed here)."""
        cached = self._cache.get(key_id)
        if isinstance(cached, AESGCM):
            return cached
        if cached is _ERASED:
            return None
        return self._load(key_id)

    def is_erased(self, key_id: UUID) -> bool:
        """True when the key row says erased (asks the database unless the cache knows)."""
        if self._cache.get(key_id) is _ERASED:
            return True
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(
                sql.SQL("SELECT erased_at FROM {} WHERE key_id = %s").format(self.table),
                (key_id,),
            )
            row = curs.fetchone()
        return row is not None and row["erased_at"] is not None

    def _load(self, key_id: UUID) -> AESGCM | None:
        with self.datastore.transaction(commit=False) as curs:
            curs.execute(
                sql.SQL("SELECT data_key FROM {} WHERE key_id = %s").format(self.table),
                (key_id,),
            )
            row = curs.fetchone()
        if row is None:
            return None  # nothing cached: a key may be created later by another process
        if row["data_key"] is None:
            self._cache[key_id] = _ERASED
            return None
        key = AESGCM(bytes(row["data_key"]))
        self._cache[key_id] = key
        return key

    # ----- destruction -----------------------------------------------------------------

    def destroy(self, curs: Any, key_id: UUID) -> None:
        """Within the caller's transaction: overwrite the key with NULL, stamp the erasure.
        A missing row is inserted already erased, so writes for the agent stay refused."""
        curs.execute(
            sql.SQL(
                "INSERT INTO {} (key_id, data_key, erased_at) VALUES (%s, NULL, now()) "
                "ON CONFLICT (key_id) DO UPDATE SET data_key = NULL, "
                "erased_at = COALESCE({}.erased_at, now())"
            ).format(self.table, sql.Identifier(TABLE)),
            (key_id,),
        )
        self.forget(key_id)

    def forget(self, key_id: UUID) -> None:
        """This process stops using the key at once (the ``Erased`` marker was read)."""
        self._cache[key_id] = _ERASED


def new_nonce() -> bytes:
    return os.urandom(12)
