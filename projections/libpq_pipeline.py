"""Reading rows in the middle of a pipelined batch (``ReadModelView.apply_batch``).

A view writes a batch in libpq pipeline mode on one cursor. psycopg hands each reply to the
cursor that sent its statement, as soon as the reply is read — and it reads replies whenever
it sends the next statement. So when the batch is large enough for the server to be
answering while statements are still going out, ``curs.execute(SELECT …)`` can be handed the
reply of an earlier ``INSERT`` on the same cursor, and ``curs.fetchone()`` then fails with
"the last operation didn't produce records (command status: INSERT 0 1)" — the projector's
failure at 100k facts (ADR-0022/0030). A statement whose rows are needed is therefore run on
a cursor of its own: that cursor has sent nothing else, so the only reply it can be given is
its own. Same connection, same transaction, same order on the server.
"""

from __future__ import annotations

from typing import Any

from eventsourcing.persistence import Tracking
from psycopg.rows import dict_row


def fetch_rows(curs: Any, query: Any, params: Any = None) -> list[dict[str, Any]]:
    """The rows of ``query``, run in ``curs``'s transaction on a cursor of its own."""
    with curs.connection.cursor(row_factory=dict_row) as own:
        own.execute(query, params)
        rows: list[dict[str, Any]] = own.fetchall()
        return rows


def fetch_row(curs: Any, query: Any, params: Any = None) -> dict[str, Any] | None:
    """The first row of ``query`` (or None), on a cursor of its own — see ``fetch_rows``."""
    rows = fetch_rows(curs, query, params)
    return rows[0] if rows else None


def insert_tracking(view: Any, curs: Any, tracking: Tracking) -> None:
    """eventsourcing's ``_insert_tracking`` fetches the row it inserted (single-row tracking,
    to refuse a replay): run it on a cursor of its own for the same reason."""
    with curs.connection.cursor(row_factory=dict_row) as own:
        view._insert_tracking(own, tracking)
