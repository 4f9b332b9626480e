"""Rank fusion's two turn lists and the subject sweep's turns from ONE read of the passing turns,
under a narrowing whose turns are searched exactly (ADR-0047).

Why: both are exact searches over the same rows — the turns that pass the narrowing
(``exact_turns_when_few``) — one nearest to the question, one nearest to the name-less
question (``subject_sweep.sweep`` with ``only_subject=False``). The rows lie scattered over
the table, and reading them is most of either statement (ten sessions' 5,000 turns at 100k
facts: 7.6 ms a statement, the distances a fraction of it), so the second read is spared, as
``semantic_and_swept_facts`` spares the facts' second read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.signals.bm25 import bm25_messages
from engramdb.services.retrieve.signals.messages import lists_statement, read_lists, turn_limit
from engramdb.services.retrieve.signals.shared import (
    Narrowing,
    message_visibility,
    narrowing_params,
    similarity_threshold,
)


@dataclass
class SweptTurns:
    """The subject sweep's turns read with the turn lists: ``(message_id, session_id)``
    nearest to the name-less question first (``sweep_fetch`` of them), and their rows in
    ``TURN_ROW``'s shape (cosine to the question), as ``message_rows`` returns them."""

    nearest: list[tuple[str, str]] = field(default_factory=list)
    rows: dict[str, tuple[Any, ...]] = field(default_factory=dict)


def message_lists_and_swept(
    conn: Any,
    agent_id: str,
    qvec: str | None,
    sweep_vec: str,
    query_text: str,
    cfg: RetrieveConfig,
    floor: float,
    as_of: datetime | None,
    scope: Narrowing,
    sweep_fetch: int,
    bm25_found: list[tuple[str, float]] | None = None,
) -> tuple[dict[str, dict[str, float]], list[tuple[Any, ...]], list[tuple[str, float]], SweptTurns]:
    """``message_lists`` (its signals, rows and BM25's best, the same values in the same
    order) and the sweep's turns, from one read of the passing turns. The caller makes sure
    both searches would take their exact branch: ``nearest_cte``'s exact branch over these
    rows (``ORDER BY d + 0, id``) is what each statement apart returns. No ``qvec`` (its
    embedding failed): no nearest turns and no cosines, as ``message_lists`` without one."""
    assert scope.selective or scope.few_turns, "the passing turns are read once only when searched exactly"
    if bm25_found is None:
        bm25_found = bm25_messages(conn, agent_id, query_text, as_of, cfg.candidates.candidate_pool, scope=scope)
    params: dict[str, Any] = {
        "q": qvec, "q2": sweep_vec, "a": agent_id, "t": as_of, "n": turn_limit(cfg), "n2": sweep_fetch, "maxd": 1.0 - similarity_threshold(cfg, floor),
        "bm_ids": [i for i, _ in bm25_found], "bm_scores": [s for _, s in bm25_found],
        **narrowing_params(scope),
    }
    ctes = f"""r AS MATERIALIZED (
                 SELECT m.message_id, m.session_id, m.embedding <=> %(q)s::vector AS d,
                        m.embedding <=> %(q2)s::vector AS d2
                   FROM mem_messages m
                  WHERE m.agent_id = %(a)s AND {message_visibility(as_of, scope=scope)} AND m.embedding IS NOT NULL),
             nn AS (SELECT message_id, d FROM r ORDER BY d + 0, message_id LIMIT %(n)s),
             sem AS (SELECT message_id, 1 - d AS cos FROM nn WHERE d <= %(maxd)s),
             -- k: the statement's own order (ties of distance by id, in the column's collation)
             sw AS (SELECT s.*, row_number() OVER () AS k
                      FROM (SELECT message_id, session_id, d2 FROM r ORDER BY d2 + 0, message_id LIMIT %(n2)s) s)"""
    sig, rows, found, further = read_lists(conn, cfg, lists_statement(ctes, sweep=True), params)
    swept = sorted((int(k), row[0], session) for row, k, session in further if k is not None)
    swept_rows = {row[0]: row for row, k, _ in further if k is not None}
    return sig, rows, found, SweptTurns([(mid, session) for _, mid, session in swept], swept_rows)
