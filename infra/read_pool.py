"""The read-side connection pool: autocommit psycopg connections whose ``search_path`` sees the
read models (the projection tables) of one schema.

One pool per process, owned by the composition root (``Memory``) and lent to every reader
(the retriever, pre-retrieval): connections are a server resource, and separate pools per
reader each kept their own idle connections and ceilings. A reader that needs a
per-statement limit (pre-retrieval's ``statement_timeout``) sets it transaction-locally, so
nothing leaks into the shared connections.
"""

from __future__ import annotations

from psycopg_pool import ConnectionPool

from engramdb.infra.pgsql import search_path_option

# The retriever's ceiling (8: one call takes up to 3 connections, see ``_pool_spares_one``)
# plus pre-retrieval's (4), which had a pool of their own before they shared this one.
READ_POOL_MAX_SIZE = 8 + 4
READ_POOL_MIN_SIZE = 1


def open_read_pool(
    conninfo: str,
    schema: str | None,
    *,
    min_size: int = READ_POOL_MIN_SIZE,
    max_size: int = READ_POOL_MAX_SIZE,
    timeout: float = 30.0,
) -> ConnectionPool:
    """An open pool; ``schema`` (``None`` = the server's default ``search_path``) comes first on
    the ``search_path``, then ``public`` (where the extensions live). ``timeout``: how long
    ``connection()`` waits for a free connection by default."""
    kwargs: dict[str, object] = {"autocommit": True}
    if schema:
        kwargs["options"] = search_path_option(schema)
    return ConnectionPool(
        conninfo, min_size=min_size, max_size=max_size, kwargs=kwargs, open=True, timeout=timeout
    )
