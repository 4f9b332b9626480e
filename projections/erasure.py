"""Dropping an erased agent's read-model rows and cached vectors (ADR-0018).

One function for both callers: the erase command (every read model at once, right after the
key is destroyed) and each projector's ``AgentMemory.Erased`` handler (its own tables, in log
order). The projector must do it too: a projector that lagged behind still held the key in
its cache and may have written the agent's rows AFTER the command dropped them; handling the
marker in order removes them again, and events after it are unreadable.

Cached vectors go as well: ``mem_embedding_cache`` is keyed by the hash of each embedded
string, recomputed here in SQL from the rows about to be deleted (a vector can leak what it
embeds). A vector shared with another agent's identical text is recomputed on demand.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from psycopg import sql

from engramdb.projections.libpq_pipeline import fetch_row, fetch_rows
from engramdb.projections.tables import Table


def drop_agent_rows(curs: Any, agent_id: str, tables: Iterable[Table]) -> int:
    """Delete ``agent_id``'s rows from ``tables`` that exist in the current search path, then
    the cached vectors of their embedded texts; returns the number of rows deleted.

    Lock order is the same for every caller — tables in ``READ_MODELS`` order, the embedding
    cache last — so the erase command and a projector handling the marker at the same time
    wait for each other instead of deadlocking."""
    deleted = 0
    hashes: list[str] = []
    for table in tables:
        row = fetch_row(curs, "SELECT to_regclass(%s) IS NOT NULL AS ok", (table.name,))
        if row is None or not row["ok"]:
            continue
        name = sql.Identifier(table.name)
        if table.embedded_text is not None:
            hashed = "encode(sha256(convert_to(" + table.embedded_expression("r") + ", 'UTF8')), 'hex')"
            found = [r["h"] for r in fetch_rows(
                curs,
                sql.SQL("DELETE FROM {} AS r WHERE r.agent_id = %s RETURNING " + hashed + " AS h")
                .format(name),
                (agent_id,),
            )]
            hashes.extend(found)
            deleted += len(found)
        else:
            # counted in SQL: in pipeline mode ``rowcount`` is -1 until the reply was read
            counted = fetch_row(curs, sql.SQL(
                "WITH gone AS (DELETE FROM {} WHERE agent_id = %s RETURNING 1) "
                "SELECT count(*) AS n FROM gone").format(name), (agent_id,))
            deleted += int(counted["n"]) if counted else 0
    if hashes:
        curs.execute(
            "DELETE FROM mem_embedding_cache WHERE text_hash = ANY(%s)", (sorted(set(hashes)),)
        )
    return deleted
