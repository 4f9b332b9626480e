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
from engramdb.services.retrieve.signals.messages import TURN_ROW
from engramdb.services.retrieve.signals.shared import (
    Narrowing,
    batch,
    message_visibility,
    narrowing_params,
    set_hnsw,
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
    limit = max(cfg.candidates.candidate_pool, cfg.sizes.topk_events * 4)
    if bm25_found is None:
        bm25_found = bm25_messages(conn, agent_id, query_text, as_of, cfg.candidates.candidate_pool, scope=scope)
    params: dict[str, Any] = {
        "q": qvec, "q2": sweep_vec, "a": agent_id, "t": as_of, "n": limit, "n2": sweep_fetch,
        "maxd": 1.0 - similarity_threshold(cfg, floor),
        "bm_ids": [i for i, _ in bm25_found], "bm_scores": [s for _, s in bm25_found],
        **narrowing_params(scope),
    }
    sql = f"""
        WITH r AS MATERIALIZED (
                 SELECT m.message_id, m.session_id, m.embedding <=> %(q)s::vector AS d,
                        m.embedding <=> %(q2)s::vector AS d2
                   FROM mem_messages m
                  WHERE m.agent_id = %(a)s AND {message_visibility(as_of, scope=scope)} AND m.embedding IS NOT NULL),
             nn AS (SELECT message_id, d FROM r ORDER BY d + 0, message_id LIMIT %(n)s),
             sem AS (SELECT message_id, 1 - d AS cos FROM nn WHERE d <= %(maxd)s),
             -- k: the statement's own order (ties of distance by id, in the column's collation)
             sw AS (SELECT s.*, row_number() OVER () AS k
                      FROM (SELECT message_id, session_id, d2 FROM r ORDER BY d2 + 0, message_id LIMIT %(n2)s) s),
             bm AS (SELECT * FROM unnest(%(bm_ids)s::text[], %(bm_scores)s::float8[]) AS b(id, score)),
             ids AS (SELECT message_id FROM sem UNION SELECT id FROM bm UNION SELECT message_id FROM sw)
        SELECT {TURN_ROW},
               sem.cos, bm.score, sw.k, sw.session_id, sem.message_id IS NOT NULL OR bm.id IS NOT NULL
          FROM ids
          JOIN mem_messages m ON m.agent_id = %(a)s AND m.message_id = ids.message_id
          LEFT JOIN sem ON sem.message_id = ids.message_id
          LEFT JOIN bm ON bm.id = ids.message_id
          LEFT JOIN sw ON sw.message_id = ids.message_id
         ORDER BY sem.message_id IS NULL, m.message_id
    """
    with batch(conn):
        # the settings ``message_lists`` runs under (custom plans for the same reasons)
        set_hnsw(conn, max(cfg.candidates.hnsw_ef_search, limit))
        cur = conn.execute(sql, params)
    sig: dict[str, dict[str, float]] = {}
    rows: list[tuple[Any, ...]] = []
    found: list[tuple[str, float]] = []
    swept: list[tuple[int, str, str]] = []
    swept_rows: dict[str, tuple[Any, ...]] = {}
    for mid, text, occurred_at, speaker, session_id, cosine, sem_cos, bm_score, k, sw_session, listed in cur.fetchall():
        row = (mid, text, occurred_at, speaker, session_id, cosine)
        if k is not None:
            swept.append((int(k), mid, sw_session))
            swept_rows[mid] = row
        if not listed:
            continue
        if sem_cos is not None:
            sig.setdefault(mid, {})["cosine"] = float(sem_cos)
        if bm_score is not None:
            found.append((mid, float(bm_score)))
        rows.append(row)
    found.sort(key=lambda t: (-t[1], t[0]))
    swept.sort()
    return sig, rows, found, SweptTurns([(mid, session) for _, mid, session in swept], swept_rows)
