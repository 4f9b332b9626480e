"""The conversations signal ("Relevant conversations"): the same semantic + keyword search
over raw messages, candidates and rows in one statement."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.signals.bm25 import bm25_messages
from engramdb.services.retrieve.signals.keyword import keyword_filter, keyword_params, match_count
from engramdb.services.retrieve.signals.shared import (
    Narrowing,
    batch,
    exact_turns_when_few,
    message_visibility,
    narrowing_params,
    nearest_cte,
    set_hnsw,
    similarity_threshold,
)


# A turn's row as every turn signal returns it (``rank_events`` reads this shape): id, text,
# when, who, session, and its cosine to the query vector ``%(q)s`` (NULL without one).
def turn_row(alias: str) -> str:
    """A turn's row columns as ``rank_events`` reads them, its cosine to ``%(q)s`` in SQL."""
    m = alias
    return (f"{m}.message_id, {m}.text, {m}.occurred_at, {m}.speaker, {m}.session_id,"
            f" CASE WHEN {m}.embedding IS NULL OR %(q)s::vector IS NULL THEN NULL"
            f" ELSE 1 - ({m}.embedding <=> %(q)s::vector) END")


TURN_ROW = turn_row("m")


def turn_limit(cfg: RetrieveConfig) -> int:
    """How many nearest turns the turn signals read: the candidate pool, or four per event
    shown when more events are asked for."""
    return max(cfg.candidates.candidate_pool, cfg.sizes.topk_events * 4)


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
    small: bool | None = None,
    scope: Narrowing | None = None,
) -> tuple[dict[str, dict[str, float]], list[tuple[Any, ...]]]:
    """Conversation candidates and their rows in ONE statement (one round trip, the HNSW
    settings pipelined with it): semantic nearest above the threshold ∪ keyword best, each
    with its cosine and keyword score."""
    limit = turn_limit(cfg)
    ctes: list[str] = []
    sources: list[str] = []
    if qvec is not None:
        ctes.append(
            nearest_cte("mem_messages", "m", "message_id", message_visibility(as_of, scope=scope), exact_rows,
                        exact_turns_when_few(small, scope))
            + ", sem AS (SELECT message_id, 1 - d AS cos FROM nn WHERE d <= %(maxd)s)"
        )
        sources.append("SELECT message_id FROM sem")
    else:
        ctes.append("sem AS (SELECT NULL::text AS message_id, NULL::float8 AS cos WHERE FALSE)")
    params: dict[str, Any] = {"q": qvec, "a": agent_id, "t": as_of, "n": limit,
                              "maxd": 1.0 - similarity_threshold(cfg, floor), **narrowing_params(scope)}
    if words:
        ctes.append(
            f"""kw AS MATERIALIZED (
                SELECT m.message_id, {match_count("m.text", len(words))} / %(k)s AS s
                  FROM mem_messages m
                 WHERE m.agent_id = %(a)s AND {message_visibility(as_of, scope=scope)} AND {keyword_filter("m.text", mode)}
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
        SELECT {TURN_ROW},
               sem.cos, kw.s
          FROM ids
          JOIN mem_messages m ON m.agent_id = %(a)s AND m.message_id = ids.message_id
          LEFT JOIN sem ON sem.message_id = ids.message_id
          LEFT JOIN kw ON kw.message_id = ids.message_id
         ORDER BY m.message_id
    """
    with batch(conn):
        if qvec is not None:
            set_hnsw(conn, max(cfg.candidates.hnsw_ef_search, limit))
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


def message_rows(conn: Any, agent_id: str, ids: list[str], qvec: str | None,
                 scope: Narrowing | None = None) -> list[tuple[Any, ...]]:
    """Rows of messages found by another signal (BM25), in ``message_events``' row shape, with
    their cosine to the query computed in SQL (``scope``: only turns that pass it — the
    signals already narrowed; this keeps any later list from adding one that does not)."""
    narrowed = "" if scope is None else f" AND {scope.turn('m')}"
    if not ids:
        return []
    return conn.execute(
        f"""
        SELECT {TURN_ROW}
          FROM mem_messages m
         WHERE m.agent_id = %(a)s AND m.message_id = ANY(%(ids)s){narrowed}
         ORDER BY m.message_id
        """,
        {"a": agent_id, "ids": ids, "q": qvec, **narrowing_params(scope)},
    ).fetchall()


def message_lists(
    conn: Any,
    agent_id: str,
    qvec: str | None,
    query_text: str,
    cfg: RetrieveConfig,
    floor: float,
    as_of: datetime | None,
    exact_rows: int = 0,
    small: bool | None = None,
    bm25_found: list[tuple[str, float]] | None = None,
    scope: Narrowing | None = None,
) -> tuple[dict[str, dict[str, float]], list[tuple[Any, ...]], list[tuple[str, float]]]:
    """Rank fusion's two turn lists (ADR-0031, ADR-0042): the nearest turns above the threshold
    (``message_events`` without keywords) and BM25's best (``bm25_messages``), with the rows of
    both from ONE statement. Before, three round trips — nearest + rows, BM25, then the rows
    BM25 alone found. Same results: the cosine signals, the rows (the nearest's by id, then
    those BM25 alone found, by id) and BM25's (id, score) best first.

    ``bm25_found``: BM25's best already read (``bm25_messages`` with the same query text and
    ``cfg.candidates.candidate_pool``). The pipeline reads it while the question is still being embedded,
    so only the nearest turns and the rows wait for the vector (ADR-0042); without it, it is
    read here first."""
    limit = turn_limit(cfg)
    if qvec is not None:
        sem = (nearest_cte("mem_messages", "m", "message_id", message_visibility(as_of, scope=scope), exact_rows,
                        exact_turns_when_few(small, scope))
               + ", sem AS (SELECT message_id, 1 - d AS cos FROM nn WHERE d <= %(maxd)s)")
    else:
        sem = "sem AS (SELECT NULL::text AS message_id, NULL::float8 AS cos WHERE FALSE)"
    params: dict[str, Any] = {"q": qvec, "a": agent_id, "t": as_of, "n": limit,
                              "maxd": 1.0 - similarity_threshold(cfg, floor), **narrowing_params(scope)}
    if bm25_found is None:
        bm25_found = bm25_messages(conn, agent_id, query_text, as_of, cfg.candidates.candidate_pool, scope=scope)
    params.update(bm_ids=[i for i, _ in bm25_found], bm_scores=[s for _, s in bm25_found])
    sig, rows, found, _ = read_lists(conn, cfg, lists_statement(sem), params)
    return sig, rows, found


def lists_statement(ctes: str, sweep: bool = False) -> str:
    """``message_lists``' statement over its CTEs (``sem``: the nearest turns above the
    threshold, and ``bm``'s ids and scores from ``%(bm_ids)s`` / ``%(bm_scores)s``): the rows
    of both with their cosine and score. ``sweep``: the CTEs also hold ``sw`` (the subject
    sweep's turns, ``k`` their order), whose rows come too, with ``k`` and their session
    (``signals.message_lists_and_swept``)."""
    union, columns, join = ("", "", "") if not sweep else (
        " UNION SELECT message_id FROM sw", ", sw.k, sw.session_id",
        " LEFT JOIN sw ON sw.message_id = ids.message_id")
    return f"""
        WITH {ctes},
             bm AS (SELECT * FROM unnest(%(bm_ids)s::text[], %(bm_scores)s::float8[]) AS b(id, score)),
             ids AS (SELECT message_id FROM sem UNION SELECT id FROM bm{union})
        SELECT {TURN_ROW},
               sem.cos, bm.score{columns}
          FROM ids
          JOIN mem_messages m ON m.agent_id = %(a)s AND m.message_id = ids.message_id
          LEFT JOIN sem ON sem.message_id = ids.message_id
          LEFT JOIN bm ON bm.id = ids.message_id{join}
         ORDER BY sem.message_id IS NULL, m.message_id
    """


def read_lists(conn: Any, cfg: RetrieveConfig, sql: str, params: dict[str, Any]) -> tuple[
        dict[str, dict[str, float]], list[tuple[Any, ...]], list[tuple[str, float]], list[tuple[Any, ...]]]:
    """Run a ``lists_statement``: the cosine signals and rows of the turns either list holds,
    BM25's (id, score) best first, and every row's further columns (``(row, *columns)``, for
    the rows that carry some)."""
    limit = turn_limit(cfg)
    with batch(conn):
        # set_hnsw also forces custom plans (BM25 needs them: the agent's size and the words'
        # frequencies choose GIN vs the agent index) for this transaction only
        set_hnsw(conn, max(cfg.candidates.hnsw_ef_search, limit))
        cur = conn.execute(sql, params)
    sig: dict[str, dict[str, float]] = {}
    rows: list[tuple[Any, ...]] = []
    found: list[tuple[str, float]] = []
    further: list[tuple[Any, ...]] = []
    for mid, text, occurred_at, speaker, session_id, cosine, sem_cos, bm_score, *more in cur.fetchall():
        row = (mid, text, occurred_at, speaker, session_id, cosine)
        if more:
            further.append((row, *more))
        if sem_cos is None and bm_score is None:  # a row only another list holds
            continue
        if sem_cos is not None:
            sig.setdefault(mid, {})["cosine"] = float(sem_cos)
        if bm_score is not None:
            found.append((mid, float(bm_score)))
        rows.append(row)
    found.sort(key=lambda t: (-t[1], t[0]))
    return sig, rows, found, further
