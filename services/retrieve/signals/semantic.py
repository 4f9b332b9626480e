"""The semantic signal: the agent's nearest facts to the query vector above the similarity
threshold (HNSW, or exact for small agents)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.signals.shared import (
    Narrowing,
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
            f"WITH {nearest_cte('mem_facts', 'f', 'fact_id', where, exact_rows, exact_when_selective(small, scope), late=late, late_cols=late_cols)}"
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
