"""The BM25 signal: Okapi BM25 (Lucene's IDF, the benchmark's bm25s baseline) over messages
or facts, computed in ONE statement from the read models' stored search columns
(``projections/search.py``: accent folding + English Snowball stemming, stop words dropped).

Why in SQL: the IDF needs every visible row of the agent (N, average length, document
frequencies) and the term frequencies live in the stored ``tsvector``; shipping rows to
Python would cost more than the scoring. The document frequencies are exact without a count
per word: the candidate set (rows holding any query lexeme, found through the GIN index) holds
every visible row that contains a query lexeme, so grouping its lexemes gives each df. The
term frequencies are read from each candidate's vector cut down to the query's lexemes
(``setweight`` marks them, ``ts_filter`` keeps them): unnesting whole vectors cost twice as
much at 10k messages.

score(d) = Σ over query lexemes t in d of
           idf(t) · tf·(k1+1) / (tf + k1·(1 − b + b·|d|/avgdl)),
idf(t) = ln(1 + (N − df + ½)/(df + ½)); N, avgdl and df over the agent's rows visible now (or
as of ``as_of``). N and avgdl are counted exactly up to ``EXACT_STATS_ROWS`` rows; above, they
are estimated from a fixed 1/64 hash sample of the rows (ADR-0024): counting every row of a
100k-fact agent was most of a retrieve's time, and the estimate moves each IDF by ~0.03.
Both read a narrow covering index (``projections.search.stats_index``), not the heap. The (k1+1) factor only scales the scores (bm25s leaves it out): rankings are
the same.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from engramdb.projections.search import SAMPLE_BUCKETS, sample_bucket
from engramdb.services.retrieve.signals.shared import (
    Narrowing,
    custom_plans,
    fact_visibility,
    late_probe,
    message_visibility,
    narrowing_params,
)

K1 = 1.5
B = 0.75
# N and avgdl are exact for an agent with at most about this many visible rows (estimated from
# the 1/64 sample); above it they are the sample's estimate (ADR-0024)
EXACT_STATS_ROWS = 20_000

# a query lexeme as a tsquery operand: quoted so it is taken verbatim (no re-parsing or
# re-stemming of the already analysed lexeme), quotes and backslashes doubled. A tsvector's
# lexemes are distinct and sorted: the same words make the same query.
_OPERAND = "'''' || replace(replace(t.lexeme, '\\', '\\\\'), '''', '''''') || ''''"


def _bm25_sql(table: str, alias: str, id_col: str, where: str, keep: str = "", late: str = "") -> str:
    """The statement for ``table`` (``where``: the visibility filter of ``alias``); the query
    text and the limit are the parameters ``q`` / ``n``. A narrowing (ADR-0047) picks the rows
    scored, never the statistics (``_narrowed_facts``): ``keep``, a condition on the row
    ``alias`` itself, read with each hit; ``late``, a condition on a scored row ``s`` (its id
    ``s.id``) that needs a probe, tested in score order until ``n`` rows pass."""
    a = alias
    kept, keep_col = ("WHERE h.keep", f", ({keep}) AS keep") if keep else ("", "")
    # narrowed: the scored rows in order, fenced (OFFSET 0) so ``late`` runs on them in that
    # order and LIMIT stops the scan (the same rows as testing it first: the order is total)
    opening, closing = ("SELECT s.id, s.score FROM (", f" OFFSET 0) s WHERE {late}") if late else ("", "")
    visible = f"{a}.agent_id = %(a)s AND {where}"
    return f"""
    WITH q AS MATERIALIZED (
        SELECT array_agg(t.lexeme) AS lexemes, string_agg({_OPERAND}, ' | ')::tsquery AS query
          FROM unnest(engramdb_tsv(%(q)s)) t
    ), sample AS MATERIALIZED (
        SELECT count(*)::float8 * {SAMPLE_BUCKETS} AS n, coalesce(avg({a}.search_len), 0)::float8 AS avgdl
          FROM {table} {a}
         WHERE {visible} AND {sample_bucket(f"{a}.{id_col}")} = 0 AND (SELECT query FROM q) IS NOT NULL
    ), stats AS MATERIALIZED (
        SELECT n, avgdl FROM sample WHERE n > %(exact_rows)s
        UNION ALL
        SELECT * FROM (
            SELECT count(*)::float8 AS n, coalesce(avg({a}.search_len), 0)::float8 AS avgdl
              FROM {table} {a} WHERE {visible} AND (SELECT query FROM q) IS NOT NULL
        ) exact WHERE (SELECT n <= %(exact_rows)s FROM sample)
    ), hits AS MATERIALIZED (
        SELECT {a}.{id_col} AS id, {a}.search_len::float8 AS len, t.lexeme,
               coalesce(array_length(t.positions, 1), 1)::float8 AS tf{keep_col}
          FROM {table} {a}
         CROSS JOIN LATERAL unnest(ts_filter(
               setweight({a}.search_tsv, 'A', (SELECT lexemes FROM q)), '{{a}}')) t
         WHERE {visible} AND {a}.search_tsv @@ (SELECT query FROM q)
    ), df AS (
        SELECT lexeme, count(*)::float8 AS df FROM hits GROUP BY lexeme
    )
    {opening}SELECT h.id,
           sum(ln(1 + (s.n - d.df + 0.5) / (d.df + 0.5))
               * h.tf * (%(k1)s + 1)
               / (h.tf + %(k1)s * (1 - %(b)s + %(b)s * h.len / greatest(s.avgdl, 1e-9)))) AS score
      FROM hits h JOIN df d USING (lexeme) CROSS JOIN stats s {kept}
     GROUP BY h.id
     ORDER BY score DESC, h.id{closing}
     LIMIT %(n)s
    """


def _narrowed_facts(scope: Narrowing | None) -> tuple[str, str]:
    """A narrowing over facts as ``(keep, late)``: a selective one's listed ids (a hashed test
    on each hit), else the fact's source-turn probe by primary key, late. Why late, and the statistics unnarrowed: a
    filter picks which rows are scored, not the collection they are scored against — as a
    Lucene / Elasticsearch filter clause leaves the IDF alone. Narrowing the statistics made
    every sampled row and every hit pay the source probe (~78 ms of a broad filter's call at
    100k facts, ADR-0047); now only the rows read in score order until ``n`` pass do."""
    if scope is None:
        return "", ""
    if scope.copied:  # the fact's own copy of its turns' scope, a column of the hit
        return scope.fact("f"), ""
    if scope.selective:
        return "f.fact_id = ANY(%(nwf)s::text[])", ""
    return "", late_probe(f"SELECT true FROM mem_facts lf WHERE lf.agent_id = %(a)s AND lf.fact_id = s.id"
                      f" AND {scope.fact('lf')}")


def _narrowed_turns(scope: Narrowing | None) -> str:
    """A narrowing over turns as ``keep``: the hit turn's own session / metadata (no probe)."""
    return "" if scope is None else scope.turn("m")


def _exact(exact_rows: int | None) -> int:
    # read at call time: the latency bench measures exact statistics beside the sampled ones
    return EXACT_STATS_ROWS if exact_rows is None else int(exact_rows)


def _run(conn: Any, statement: str, params: dict[str, Any]) -> list[tuple[str, float]]:
    # custom plans: the agent's size and the words' frequencies choose GIN vs the agent index
    with custom_plans(conn):
        cur = conn.execute(statement, params)
    return [(r[0], float(r[1])) for r in cur.fetchall()]


def bm25_messages(
    conn: Any,
    agent_id: str,
    query_text: str,
    as_of: datetime | None,
    limit: int,
    k1: float = K1,
    b: float = B,
    exact_rows: int | None = None,
    scope: Narrowing | None = None,
) -> list[tuple[str, float]]:
    """(message_id, BM25 score) of the agent's messages visible (as of ``as_of``), best
    first, ties by id. The speaker's name is part of each message's document. ``scope``:
    only turns that pass it are returned, scored against all of them (``_narrowed_facts``)."""
    statement = _bm25_sql("mem_messages", "m", "message_id", message_visibility(as_of),
                          keep=_narrowed_turns(scope))
    return _run(conn, statement, {"a": agent_id, "q": query_text, "t": as_of, "n": limit,
                                  "k1": float(k1), "b": float(b), "exact_rows": _exact(exact_rows),
                                  **narrowing_params(scope)})


def bm25_facts(
    conn: Any,
    agent_id: str,
    query_text: str,
    as_of: datetime | None,
    min_confidence: float,
    limit: int,
    k1: float = K1,
    b: float = B,
    exact_rows: int | None = None,
    scope: Narrowing | None = None,
) -> list[tuple[str, float]]:
    """(fact_id, BM25 score) of the agent's facts active now (or as of ``as_of``) with at
    least ``min_confidence``, best first, ties by id. N, avgdl and df count the same facts;
    the entity's name is part of each fact's document. ``scope``: only facts that pass it
    are returned, scored against all of them (``_narrowed_facts``)."""
    where = f"{fact_visibility(as_of)} AND f.confidence >= %(minc)s"
    statement = _bm25_sql("mem_facts", "f", "fact_id", where, *_narrowed_facts(scope))
    return _run(conn, statement, {"a": agent_id, "q": query_text, "t": as_of, "n": limit,
                                  "minc": float(min_confidence), "k1": float(k1),
                                  "b": float(b), "exact_rows": _exact(exact_rows),
                                  **narrowing_params(scope)})
