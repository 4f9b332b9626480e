"""Reads inside a pipelined batch get their own rows (``projections.libpq_pipeline``).

The projector's batch writes on one cursor in pipeline mode; once enough statements are in
flight, psycopg hands the replies of earlier INSERTs to that cursor while it sends the next
statement, and a fetch on it reads "INSERT 0 1" instead of rows — the memory projector's
failure at 100k facts. These tests drive that situation on the real server (the shared
cursor's failure itself depends on timing — reproduced by hand with the same 2,000 writes and
pause, about half the runs on a loaded box — so it is not asserted here).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from engramdb.projections.libpq_pipeline import fetch_row, fetch_rows

IN_FLIGHT = 2000  # statements sent before the read: enough for replies to come back meanwhile
PAYLOAD = "x" * 3000


@pytest.fixture
def conn(pg_url: str, fresh_schema: Any) -> Iterator[psycopg.Connection[dict[str, Any]]]:
    schema, _ = fresh_schema("pipe")
    with psycopg.connect(pg_url, row_factory=dict_row) as c:
        c.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        c.execute("CREATE TABLE notes (n int, body text)")
        c.commit()
        yield c


def _write_many(curs: Any) -> None:
    for i in range(IN_FLIGHT):
        curs.execute("INSERT INTO notes VALUES (%s, %s)", (i, PAYLOAD))


def test_a_read_on_its_own_cursor_gets_its_rows_in_the_same_transaction(conn: Any) -> None:
    with conn.transaction(), conn.cursor() as curs, conn.pipeline():
        _write_many(curs)
        time.sleep(1.0)  # as above: replies wait to be read when the reads go out
        row = fetch_row(curs, "SELECT n, length(body) AS size FROM notes WHERE n = 7")
        deleted = fetch_rows(curs, "DELETE FROM notes WHERE n < 3 RETURNING n")
        curs.execute("INSERT INTO notes VALUES (-1, 'after the reads')")
    assert row == {"n": 7, "size": len(PAYLOAD)}  # sees the batch's own uncommitted writes
    assert sorted(r["n"] for r in deleted) == [0, 1, 2]
    left = conn.execute("SELECT count(*) AS c, min(n) AS lo FROM notes").fetchone()
    assert left == {"c": IN_FLIGHT - 3 + 1, "lo": -1}  # statement order kept on the server


def test_no_row_is_none_not_an_error(conn: Any) -> None:
    with conn.transaction(), conn.cursor() as curs, conn.pipeline():
        _write_many(curs)
        assert fetch_row(curs, "SELECT n FROM notes WHERE n = -42") is None
