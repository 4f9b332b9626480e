"""Erasure that reaches the disk (issue 28 item 2, ADR-0051).

Why: a DELETE only marks rows dead. After ``erase --agent A`` the probe still found A's text
in the heap files of ``mem_messages``, ``mem_entities``, ``mem_facts``, ``mem_aliases`` (21
occurrences after a CHECKPOINT, 13 after VACUUM: plain VACUUM frees the space but does not
overwrite it, and index pages keep their keys too). Worse, the dead version of A's row in
``engramdb_data_keys`` still held the data key that crypto-shredding had just "destroyed".
Only a rewrite leaves no byte behind, so after the rows are gone this:

1. deletes A's rows from every other table of the schema that has an ``agent_id`` column and
   is not a read model (``mem_job_runs`` and whatever a later feature adds), so "every
   table" does not depend on a list someone must remember to extend;
2. rewrites (``VACUUM FULL``) each table that held any of A's rows, the embedding cache, the
   key table and — only when legacy clear events were scrubbed — the event table: the table
   and its indexes and TOAST are copied into new files with the live rows only and the old
   files are truncated when the command commits (unlinked at the next checkpoint).

The cost is a rewrite of each affected table under an ACCESS EXCLUSIVE lock (reads and
projector writes of that table wait for it): bounded by the table's size, measured in the
ADR. Not reached: the WAL and its archives, backups, filesystem blocks the old files
occupied (the OS frees them; it does not wipe them) — README "Erasure".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg import sql

from engramdb.projections.read_models import READ_MODELS

KEY_TABLE = "engramdb_data_keys"
CACHE_TABLE = "mem_embedding_cache"


def read_model_tables() -> list[str]:
    return [t.name for rm in READ_MODELS for t in rm.tables]


def agent_tables(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    """Every table of ``schema`` with an ``agent_id`` column (read models and the others)."""
    rows = conn.execute(
        "SELECT c.table_name FROM information_schema.columns c "
        "JOIN information_schema.tables t ON t.table_schema = c.table_schema "
        "AND t.table_name = c.table_name AND t.table_type = 'BASE TABLE' "
        "WHERE c.table_schema = %s AND c.column_name = 'agent_id' ORDER BY c.table_name",
        (schema,),
    ).fetchall()
    return [r[0] for r in rows]


def holding(conn: psycopg.Connection[Any], schema: str, agent_id: str,
            tables: Iterable[str]) -> list[str]:
    """The tables among ``tables`` that hold a live row of the agent (before the deletes:
    those are the files that will keep dead copies)."""
    found = []
    for name in tables:
        row = conn.execute(
            sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE agent_id = %s)").format(
                sql.Identifier(schema, name)),
            (agent_id,),
        ).fetchone()
        if row and row[0]:
            found.append(name)
    return found


def delete_other_rows(conn: psycopg.Connection[Any], schema: str, agent_id: str,
                      tables: Iterable[str]) -> int:
    """Delete the agent's rows from the non-read-model tables (job runs and the like)."""
    deleted = 0
    with conn.transaction():
        for name in tables:
            cur = conn.execute(
                sql.SQL("DELETE FROM {} WHERE agent_id = %s").format(sql.Identifier(schema, name)),
                (agent_id,),
            )
            deleted += max(cur.rowcount, 0)
    return deleted


def rewrite(conn: psycopg.Connection[Any], schema: str, tables: Iterable[str]) -> list[str]:
    """``VACUUM FULL`` each table that exists (autocommit connection: VACUUM cannot run in a
    transaction); returns the tables rewritten."""
    done = []
    for name in dict.fromkeys(tables):
        row = conn.execute("SELECT to_regclass(%s)", (f'"{schema}"."{name}"',)).fetchone()
        if row is None or row[0] is None:
            continue
        conn.execute(sql.SQL("VACUUM (FULL) {}").format(sql.Identifier(schema, name)))
        done.append(name)
    return done


def erase_to_disk(
    pipeline: Any,
    url: str,
    schema: str,
    agent_id: str,
    erase: Any,
    wait: Any,
) -> Any:
    """Run ``erase()`` (the crypto-shredding, returns ``EraseResult``), wait (``wait(position)``)
    until every projector has handled the marker — a lagging one may have written A's rows
    after the command dropped them — then delete A's other rows and rewrite what held them.
    Returns the result with ``tables_rewritten``."""
    app: Any = pipeline.app
    events = app.recorder.events_table_name
    with psycopg.connect(url, autocommit=True) as conn:
        all_tables = agent_tables(conn, schema)
        before = holding(conn, schema, agent_id, all_tables)
    result = erase()
    if result.position:
        wait(result.position)
    others = [t for t in all_tables if t not in set(read_model_tables())]
    with psycopg.connect(url, autocommit=True) as conn:
        delete_other_rows(conn, schema, agent_id, others)
        targets = [*before, *holding(conn, schema, agent_id, all_tables), KEY_TABLE]
        if before:
            targets.append(CACHE_TABLE)  # the vectors of A's texts were deleted from it
        if result.clear_events_scrubbed:
            targets.append(events)  # the overwritten clear states are dead tuples there
        done = rewrite(conn, schema, targets)
    return result.model_copy(update={"tables_rewritten": done})
