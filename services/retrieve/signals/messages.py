"""The conversations signal ("Relevant conversations"): the same semantic + keyword search
over raw messages, candidates and rows in one statement."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.signals.keyword import keyword_filter, keyword_params, match_count
from engramdb.services.retrieve.signals.shared import (
    batch,
    message_visibility,
    nearest_cte,
    set_hnsw,
    similarity_threshold,
)


def message_events(
    conn: Any,
    agent_id: str,
    qvec: str | None,
    words: list[str],
    cfg: RetrieveConfig,
    floor: float,
    as_of: datetime | None,
    mode: str = "ilike",
    exact_rows: int = 0,
) -> tuple[dict[str, dict[str, float]], list[tuple[Any, ...]]]:
    """Conversation candidates and their rows in ONE statement (one round trip, the HNSW
    settings pipelined with it): semantic nearest above the threshold ∪ keyword best, each
    with its cosine and keyword score."""
    limit = max(cfg.candidate_pool, cfg.topk_events * 4)
    ctes: list[str] = []
    sources: list[str] = []
    if qvec is not None:
        ctes.append(
            nearest_cte("mem_messages", "m", "message_id", message_visibility(as_of), exact_rows)
            + ", sem AS (SELECT message_id, 1 - d AS cos FROM nn WHERE d <= %(maxd)s)"
        )
        sources.append("SELECT message_id FROM sem")
    else:
        ctes.append("sem AS (SELECT NULL::text AS message_id, NULL::float8 AS cos WHERE FALSE)")
    params: dict[str, Any] = {"q": qvec, "a": agent_id, "t": as_of, "n": limit,
                              "maxd": 1.0 - similarity_threshold(cfg, floor)}
    if words:
        ctes.append(
            f"""kw AS MATERIALIZED (
                SELECT m.message_id, {match_count("m.text", len(words))} / %(k)s AS s
                  FROM mem_messages m
                 WHERE m.agent_id = %(a)s AND {message_visibility(as_of)} AND {keyword_filter("m.text", mode)}
                 ORDER BY s DESC, m.occurred_at DESC, m.message_id
                 LIMIT %(n)s
            )"""
        )
        sources.append("SELECT message_id FROM kw")
        params.update(keyword_params(conn, "mem_messages", "text", agent_id, words, mode))
    else:
        ctes.append("kw AS (SELECT NULL::text AS message_id, NULL::float8 AS s WHERE FALSE)")
    if not sources:
        return {}, []
    sql = f"""
        WITH {", ".join(ctes)}, ids AS ({" UNION ".join(sources)})
        SELECT m.message_id, m.text, m.occurred_at, m.speaker, m.session_id,
               CASE WHEN m.embedding IS NULL OR %(q)s::vector IS NULL THEN NULL
                    ELSE 1 - (m.embedding <=> %(q)s::vector) END,
               sem.cos, kw.s
          FROM ids
          JOIN mem_messages m ON m.agent_id = %(a)s AND m.message_id = ids.message_id
          LEFT JOIN sem ON sem.message_id = ids.message_id
          LEFT JOIN kw ON kw.message_id = ids.message_id
         ORDER BY m.message_id
    """
    with batch(conn):
        if qvec is not None:
            set_hnsw(conn, max(cfg.hnsw_ef_search, limit))
        cur = conn.execute(sql, params)
    out: dict[str, dict[str, float]] = {}
    rows: list[tuple[Any, ...]] = []
    for mid, text, occurred_at, speaker, session_id, cosine, sem_cos, kw_s in cur.fetchall():
        sig = out.setdefault(mid, {})
        if sem_cos is not None:
            sig["cosine"] = float(sem_cos)
        if kw_s is not None:
            sig["keyword"] = float(kw_s)
        rows.append((mid, text, occurred_at, speaker, session_id, cosine))
    return out, rows


def message_rows(conn: Any, agent_id: str, ids: list[str], qvec: str | None) -> list[tuple[Any, ...]]:
    """Rows of messages found by another signal (BM25), in ``message_events``' row shape, with
    their cosine to the query computed in SQL."""
    if not ids:
        return []
    return conn.execute(
        """
        SELECT m.message_id, m.text, m.occurred_at, m.speaker, m.session_id,
               CASE WHEN m.embedding IS NULL OR %(q)s::vector IS NULL THEN NULL
                    ELSE 1 - (m.embedding <=> %(q)s::vector) END
          FROM mem_messages m
         WHERE m.agent_id = %(a)s AND m.message_id = ANY(%(ids)s)
         ORDER BY m.message_id
        """,
        {"a": agent_id, "ids": ids, "q": qvec},
    ).fetchall()
