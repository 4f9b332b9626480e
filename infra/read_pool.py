"""The read-side connection pools: autocommit psycopg connections whose ``search_path`` sees
the read models (the projection tables) of one schema.

Two pools per process, owned by the composition root (``Memory``), and one rule between them
(ADR-0010): **no thread waits for a connection from a pool while it holds one from the same
pool**. A retrieve request holds one *read* connection for its sequential stages and waits
for its side stages, which run on the retriever's worker threads with connections from the
*worker* pool — sized to those threads, so a worker never waits for a connection at all.
The read pool is also lent to pre-retrieval and the health check, which hold one connection
for a few statements and wait on nothing meanwhile. So pool waits are queues, never cycles.

Every pooled connection is checked (``ConnectionPool.check_connection``, a round trip) when it
is handed out, and the first failed check sweeps the whole pool (``ConnectionPool.check``):
after a PostgreSQL restart every idle connection is stale, and psycopg_pool retries a failed
check after 1, 2, 4 … s, so without the sweep a pool of 6 stale connections would hit the
30 s timeout before handing out a fresh one; with it the first request costs one 1 s retry.
A reader that needs a per-statement limit (pre-retrieval's ``statement_timeout``) sets it
transaction-locally, so nothing leaks into shared connections.
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import ConnectionPool

from engramdb.infra.pg_time import register_clamping_loaders
from engramdb.infra.pgsql import search_path_option

# Retrieve requests' main stages, pre-retrieval (one per write in flight) and the health check.
READ_POOL_MAX_SIZE = 8
READ_POOL_MIN_SIZE = 1
# The retriever's database workers: one connection each (the worker pool's size IS the worker
# count, ``Retriever`` derives its thread count from it). Two cores: more would only time-slice.
RETRIEVE_WORKERS = 4


def open_read_pool(
    conninfo: str,
    schema: str | None,
    *,
    min_size: int = READ_POOL_MIN_SIZE,
    max_size: int = READ_POOL_MAX_SIZE,
    timeout: float = 30.0,
    name: str | None = None,
) -> ConnectionPool:
    """An open, checked pool; ``schema`` (``None`` = the server's default ``search_path``)
    comes first on the ``search_path``, then ``public`` (where the extensions live).
    ``timeout``: how long ``connection()`` waits for a free connection by default; ``name``
    shows in psycopg_pool's logs and stats."""
    kwargs: dict[str, object] = {"autocommit": True}
    if schema:
        kwargs["options"] = search_path_option(schema)
    sweeper = _Sweeper()
    pool = ConnectionPool(
        conninfo,
        min_size=min_size,
        max_size=max_size,
        kwargs=kwargs,
        open=False,
        timeout=timeout,
        name=name,
        check=sweeper.check,
        configure=register_clamping_loaders,  # out-of-range stored times never break a read
    )
    sweeper.pool = pool
    pool.open()
    return pool


class _Sweeper:
    """The pool's ``check``: one round trip; when it fails, every idle connection of the
    pool is checked too, so the retry after it gets a live (or new) one."""

    pool: ConnectionPool | None = None

    def check(self, conn: Any) -> None:
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            if self.pool is not None:
                self.pool.check()  # drops the stale idle connections, starts new ones
            raise


def open_worker_pool(
    conninfo: str, schema: str | None, workers: int = RETRIEVE_WORKERS
) -> ConnectionPool:
    """The retriever's worker pool: exactly one connection per worker thread (ADR-0010)."""
    return open_read_pool(
        conninfo, schema, min_size=0, max_size=workers, name="engramdb-retrieve-workers"
    )
