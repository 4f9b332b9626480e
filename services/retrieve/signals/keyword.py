"""The keyword signal: IDF-weighted fraction of the query's words found in a fact (or a
message, see ``messages``), candidates via ILIKE or the full-text GIN index."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from engramdb.domain.keys import match_key
from engramdb.domain.text import STOPWORDS_QUERY, WORD_RE
from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.signals.shared import (
    DF_CAP,
    N_CAP,
    Narrowing,
    custom_plans,
    escape_like,
    fact_visibility,
    narrowing_params,
)


def keyword_words(query: str, max_words: int, min_len: int) -> list[str]:
    """Words longer than 2 chars (``min_len`` 3), stop words dropped, first ``max_words``
    distinct ones, lower-cased but accents kept (ILIKE is accent-sensitive)."""
    words: list[str] = []
    for word in WORD_RE.findall(query.lower()):
        if len(word) < min_len or match_key(word) in STOPWORDS_QUERY or word.isdigit() and len(word) < 4:
            continue
        if word not in words:
            words.append(word)
        if len(words) >= max_words:
            break
    return words



FTS_CONFIG = "simple"  # language-neutral: facts stay in the user's language


def tsquery_text(words: list[str]) -> str:
    """OR of whole-word lexemes for ``to_tsquery``. Whole words, not prefixes: a prefix
    query makes PostgreSQL recheck ``to_tsvector`` on every candidate row (3× slower at 100k
    facts). Words are ``\\w+`` tokens; quotes/backslashes are escaped anyway (tsquery syntax,
    still a bound parameter)."""
    return " | ".join("'" + w.replace("\\", "\\\\").replace("'", "''") + "'" for w in words)


def match_count(column: str, n: int) -> str:
    """``(col ILIKE p0)::int·w0 + …``: the IDF-weighted count of query words found (divided
    by ``%(k)s`` = the sum of the weights, it is the weighted *fraction* of words found)."""
    return "(" + " + ".join(f"({column} ILIKE %(p{i})s)::int * %(w{i})s" for i in range(n)) + ")::float8"






def keyword_params(
    conn: Any, table: str, column: str, agent_id: str, words: list[str], mode: str
) -> dict[str, Any]:
    """Bound parameters of a keyword query, with each word weighted by its BM25 IDF in this
    agent's rows (``ln(1 + (N − df + ½)/(df + ½))``, counts capped so the lookup stays
    cheap). Unweighted, the spec's "fraction of query words found" let a frequent word (a
    speaker's name that is in every other fact) count as much as the one rare word that
    matters; LoCoMo Recall@10 rose with the weighting (ADR 0006)."""
    patterns = [f"%{escape_like(w)}%" for w in words]
    params: dict[str, Any] = {"p": patterns, "tsq": tsquery_text(words), "a": agent_id,
                              **{f"p{i}": p for i, p in enumerate(patterns)},
                              **{f"tq{i}": tsquery_text([w]) for i, w in enumerate(words)}}
    alias = table[4]  # mem_facts -> f, mem_messages -> m
    col = f"{alias}.{column}"
    counts = [f"(SELECT count(*) FROM (SELECT 1 FROM {table} {alias} WHERE {alias}.agent_id = %(a)s"
              f" LIMIT {N_CAP}) x)"]
    for i in range(len(words)):
        match = (f"to_tsvector('{FTS_CONFIG}', {col}) @@ to_tsquery('{FTS_CONFIG}', %(tq{i})s)"
                 if mode == "fts" else f"{col} ILIKE %(p{i})s")
        counts.append(f"(SELECT count(*) FROM (SELECT 1 FROM {table} {alias} WHERE "
                      f"{alias}.agent_id = %(a)s AND {match} LIMIT {DF_CAP}) x)")
    with custom_plans(conn):
        cur = conn.execute("SELECT " + ", ".join(counts), params)
    row = cur.fetchone()
    total = float(row[0]) if row else 0.0
    weights = []
    for i in range(len(words)):
        df = float(row[i + 1]) if row else 0.0
        weights.append(math.log(1.0 + (total - df + 0.5) / (df + 0.5)))
    params.update({f"w{i}": w for i, w in enumerate(weights)})
    # a query word no row contains still counts in the denominator: then the words that did
    # match explain less of the query, and the semantic signal carries more (measured: leaving
    # them out cost 3 points of LoCoMo Recall@10)
    params["k"] = sum(weights) or 1.0
    return params


def keyword_filter(column: str, mode: str) -> str:
    """Candidate filter: trigram/seq-scan ILIKE, or the full-text GIN index when present
    (``mode='fts'``: words and word prefixes; the score is still the exact ILIKE fraction)."""
    if mode == "fts":
        return f"to_tsvector('{FTS_CONFIG}', {column}) @@ to_tsquery('{FTS_CONFIG}', %(tsq)s)"
    return f"{column} ILIKE ANY(%(p)s::text[])"


def keyword_facts(
    conn: Any, agent_id: str, words: list[str], cfg: RetrieveConfig, as_of: datetime | None, mode: str = "ilike",
    scope: Narrowing | None = None,
) -> list[tuple[str, float]]:
    """(fact_id, fraction of the keyword words found in its text), best first."""
    if not words:
        return []
    params = {**keyword_params(conn, "mem_facts", "fact_text", agent_id, words, mode), "t": as_of,
              "minc": cfg.filters.min_confidence, "n": cfg.candidates.candidate_pool, **narrowing_params(scope)}
    with custom_plans(conn):
        cur = conn.execute(
            f"""
        SELECT f.fact_id,
               {match_count("f.fact_text", len(words))} / %(k)s AS s
          FROM mem_facts f
         WHERE f.agent_id = %(a)s AND {fact_visibility(as_of, scope=scope)}
           AND f.confidence >= %(minc)s AND {keyword_filter("f.fact_text", mode)}
         ORDER BY s DESC, f.valid_from DESC, f.fact_id
         LIMIT %(n)s
        """,
            params,
        )
    return [(r[0], float(r[1])) for r in cur.fetchall()]


def keyword_modes(conn: Any) -> dict[str, str]:
    """Per table, how keyword candidates are found: ``fts`` when a ``to_tsvector('simple', …)``
    GIN index exists, else ``ilike`` (fast with a pg_trgm index, a scan of the agent's rows
    without one)."""
    modes = {"mem_facts": "ilike", "mem_messages": "ilike"}
    rows = conn.execute(
        "SELECT tablename, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
        " AND tablename IN ('mem_facts', 'mem_messages')"
    ).fetchall()
    for table, indexdef in rows:
        if f"to_tsvector('{FTS_CONFIG}'" in indexdef and modes[table] != "ilike-trgm":
            modes[table] = "fts"
        if "gin_trgm_ops" in indexdef:
            modes[table] = "ilike-trgm"
    return {t: ("fts" if m == "fts" else "ilike") for t, m in modes.items()}
