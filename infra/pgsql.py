"""Two PostgreSQL spellings every layer needs the same way: the read models' search path and
pgvector's text form of a vector.

Why here: projections write the read models and services read them, and both must agree on
which schema holds them and on how a vector is spelled. Infra is the one layer both may import
(ADR-0007's layer contracts), so each lives once, here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import sql


def search_path_sql(schema: str) -> sql.Composed:
    """``SET LOCAL search_path TO <schema>, public``: the read models' schema first, then
    ``public`` for the extensions (pgvector's type and operators live there)."""
    return sql.SQL("SET LOCAL search_path TO {}, public").format(sql.Identifier(schema))


def set_search_path(curs: Any, schema: str) -> None:
    """Point the current transaction at ``schema`` (``SET LOCAL`` ends with it)."""
    curs.execute(search_path_sql(schema))


def search_path_option(schema: str) -> str:
    """The same search path as a libpq ``options`` value, for pooled connections."""
    return f"-c search_path={schema},public"


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text input form (``[a, b, …]``); cast with ``::vector`` in SQL.

    ``repr`` keeps every digit of the float, so the ``real`` pgvector stores is the correctly
    rounded value of what the embedder returned (a float32 comes back exactly); fewer digits
    would round twice. ``str`` of a list of floats is that repr, built in C (a generator join
    cost ~10% of the projector's CPU); pgvector skips the spaces.
    """
    return str(list(map(float, vector)))


def escape_like(word: str) -> str:
    """``word`` as a LIKE pattern's literal part: backslash, ``%`` and ``_`` escaped."""
    return word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
