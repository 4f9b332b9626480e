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

from engramdb.projections.tables import Table


def drop_agent_rows(curs: Any, agent_id: str, tables: Iterable[Table]) -> int:
    """Delete ``agent_id``'s rows (and the cached vectors of their texts) from ``tables``
    that exist in the current search path; returns the number of rows deleted."""
    deleted = 0
    for table in tables:
        curs.execute("SELECT to_regclass(%s) IS NOT NULL AS ok", (table.name,))
        row = curs.fetchone()
        if row is None or not row["ok"]:
            continue
        if table.embedded_text is not None:
            expression = table.embedded_expression("r")
            curs.execute(
                sql.SQL(
                    "DELETE FROM mem_embedding_cache c USING {} r WHERE r.agent_id = %s "
                    "AND c.text_hash = encode(sha256(convert_to(" + expression + ", 'UTF8')), 'hex')"
                ).format(sql.Identifier(table.name)),
                (agent_id,),
            )
        curs.execute(
            sql.SQL("DELETE FROM {} WHERE agent_id = %s").format(sql.Identifier(table.name)),
            (agent_id,),
        )
        deleted += max(curs.rowcount, 0)
    return deleted
