"""The semantic signal: the agent's nearest facts to the query vector above the similarity
threshold (HNSW, or exact for small agents)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.signals.shared import (
    Narrowing,
    agent_test,
    batch,
    exact_when_selective,
    fact_scope_split,
    narrowing_params,
    nearest_cte,
    set_hnsw,
    similarity_threshold,
)


def semantic_facts(
    conn: Any,
    agent_id: str,
    qvec: str,
    cfg: RetrieveConfig,
    floor: float,
    as_of: datetime | None,
    exact_rows: int = 0,
    small: bool | None = None,
    scope: Narrowing | None = None,
) -> list[tuple[str, float]]:
    """(fact_id, cosine) of the nearest facts above the similarity threshold, HNSW order
    (exact below ``exact_rows`` rows of the agent, see ``nearest_cte``, or as ``small`` says)."""
    limit = cfg.candidates.candidate_pool
    visible, late, late_cols = fact_scope_split(as_of, scope)
    where = f"{visible} AND f.confidence >= %(minc)s"
    with batch(conn):  # the settings and the search travel in one round trip
        set_hnsw(conn, max(cfg.candidates.hnsw_ef_search, limit))
        cur = conn.execute(
            f"WITH {nearest_cte('mem_facts', 'f', 'fact_id', where, exact_rows, exact_when_selective(small, scope), late=late, late_cols=late_cols, agent=agent_test('f', scope))}"
            " SELECT fact_id, 1 - d FROM nn WHERE d <= %(maxd)s ORDER BY d, fact_id",
            {
                "q": qvec,
                "a": agent_id,
                "t": as_of,
                "minc": cfg.filters.min_confidence,
                "n": limit,
                "maxd": 1.0 - similarity_threshold(cfg, floor),
                **narrowing_params(scope),
            },
        )
    return [(r[0], float(r[1])) for r in cur.fetchall()]


def semantic_and_swept_facts(
    conn: Any,
    agent_id: str,
    qvec: str | None,
    sweep_vec: str,
    cfg: RetrieveConfig,
    floor: float,
    as_of: datetime | None,
    scope: Narrowing,
    sweep_fetch: int,
) -> tuple[list[tuple[str, float]], list[tuple[str, str]]]:
    """``semantic_facts`` and the subject sweep's facts over every fact (``subject_sweep.sweep``
    with ``only_subject=False``: ``(fact_id, day)`` nearest to the name-less question's
    ``sweep_vec``, ``sweep_fetch`` of them) under a selective narrowing, from ONE read of its
    listed facts. Why: both are exact searches over the same rows (``exact_when_selective``),
    and those rows lie scattered over the table — a 2 % filter's 2000 facts on 1000 pages
    cost ~3 ms a read, the distances ~0.3 ms of it (ADR-0047). Each list is what its own
    statement returns: the same rows, distances and order (``ORDER BY d + 0, id``); no
    ``qvec`` (its embedding failed): no semantic rows, as ``semantic_facts`` is not asked."""
    assert scope.selective, "the listed facts are read once only under a selective narrowing"
    visible, _, _ = fact_scope_split(as_of, scope)
    with batch(conn):
        set_hnsw(conn, cfg.candidates.hnsw_ef_search)  # the same planner settings as the two apart
        cur = conn.execute(
            "WITH r AS MATERIALIZED (SELECT f.fact_id, f.embedding <=> %(q)s::vector AS d,"
            " f.embedding <=> %(q2)s::vector AS d2, f.valid_from"
            f" FROM mem_facts f WHERE {agent_test('f', scope)} AND {visible} AND f.confidence >= %(minc)s"
            " AND f.embedding IS NOT NULL),"
            " s AS (SELECT fact_id, d FROM r ORDER BY d + 0, fact_id LIMIT %(n)s),"
            # the day of the sweep's rows only: formatted for every passing fact it was ~6 %
            # of the read of six sessions' 6000 facts at 100k
            " w AS (SELECT fact_id, d2, (valid_from AT TIME ZONE 'UTC')::date::text AS day"
            " FROM (SELECT fact_id, d2, valid_from FROM r ORDER BY d2 + 0, fact_id LIMIT %(n2)s) w0)"
            " SELECT true, fact_id, d, NULL FROM s WHERE d <= %(maxd)s"
            " UNION ALL SELECT false, fact_id, d2, day FROM w",
            {
                "q": qvec,
                "q2": sweep_vec,
                "a": agent_id,
                "t": as_of,
                "minc": cfg.filters.min_confidence,
                "n": cfg.candidates.candidate_pool,
                "n2": sweep_fetch,
                "maxd": 1.0 - similarity_threshold(cfg, floor),
                **narrowing_params(scope),
            },
        )
    rows = cur.fetchall()
    near = sorted((float(r[2]), r[1]) for r in rows if r[0])
    swept = sorted((float(r[2]), r[1], r[3]) for r in rows if not r[0])
    return [(fid, 1 - d) for d, fid in near], [(fid, day) for _, fid, day in swept]
