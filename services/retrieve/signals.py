"""Candidate generators (SPEC §3.2): semantic, keyword, graph, aggregation, and the same
semantic + keyword search over raw messages ("Relevant conversations").

Every function takes a psycopg connection and returns ids with signal scores only: vectors
never travel to Python (ARCHITECTURE lesson: the seed spent ~45% of its read time parsing
vectors). User text only ever reaches SQL as a bound parameter; LIKE patterns are escaped.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engramdb.domain.keys import fold
from engramdb.domain.text import STOPWORDS_QUERY, WORD_RE
from engramdb.projections.read_models.patterns import matching_patterns
from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.planner import Edge, load_edges


def _active_now(alias: str = "f") -> str:
    # Spelled out so the planner can use the partial index ``WHERE valid_to IS NULL``.
    return f"{alias}.valid_to IS NULL AND {alias}.invalidated_at IS NULL"


def _active_at(alias: str = "f") -> str:
    f = alias
    return (
        f"{f}.recorded_at <= %(t)s AND {f}.valid_from <= %(t)s "
        f"AND ({f}.valid_to IS NULL OR {f}.valid_to > %(t)s) "
        f"AND ({f}.invalidated_at IS NULL OR {f}.invalidated_at > %(t)s)"
    )


def fact_visibility(as_of: datetime | None, alias: str = "f") -> str:
    return _active_now(alias) if as_of is None else _active_at(alias)


def message_visibility(as_of: datetime | None, alias: str = "m") -> str:
    if as_of is None:
        return "TRUE"
    return f"{alias}.occurred_at <= %(t)s AND {alias}.recorded_at <= %(t)s"


def escape_like(word: str) -> str:
    return word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def keyword_words(query: str, max_words: int, min_len: int) -> list[str]:
    """Words longer than 2 chars (``min_len`` 3), stop words dropped, first ``max_words``
    distinct ones, lower-cased but accents kept (ILIKE is accent-sensitive)."""
    words: list[str] = []
    for word in WORD_RE.findall(query.lower()):
        if len(word) < min_len or fold(word) in STOPWORDS_QUERY or word.isdigit() and len(word) < 4:
            continue
        if word not in words:
            words.append(word)
        if len(words) >= max_words:
            break
    return words


def similarity_threshold(cfg: RetrieveConfig, floor: float) -> float:
    """Raw cosine matching ``min_similarity`` on the calibrated scale."""
    return floor + cfg.min_similarity * (1.0 - floor)


def _set_hnsw(conn: Any, ef_search: int) -> None:
    # set_config(..., true) is SET LOCAL: it ends with this transaction, never leaks into the
    # pooled connection. relaxed_order lets the per-agent filter not starve the HNSW scan.
    # No parallel workers: launching them costs ~10 ms, more than any 60-row search here (and
    # the planner would launch them even for the exact branch that a one-time filter skips).
    # Custom plans: a generic plan (psycopg prepares after 5 runs) does not know the agent's
    # size and once picked a sort-all plan at 100k facts (~400 ms).
    conn.execute(
        "SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', 'relaxed_order', true),"
        " set_config('max_parallel_workers_per_gather', '0', true), set_config('plan_cache_mode', 'force_custom_plan', true)",
        (str(ef_search),),
    )


_RESTORE_PLANS = (
    "SELECT set_config('plan_cache_mode', coalesce(nullif(current_setting("
    "'engramdb.saved_plan_cache_mode', true), ''), current_setting('plan_cache_mode')), true)"
)


def _restore_plans(conn: Any) -> None:
    """Put back the ``plan_cache_mode`` saved by ``_custom_plans`` (same pipeline, no extra
    round trip)."""
    conn.execute(_RESTORE_PLANS)


@contextmanager
def _custom_plans(conn: Any) -> Iterator[None]:
    """Statements issued inside run with ``plan_cache_mode = force_custom_plan``, sent in ONE
    round trip (pipeline) with the setting and its restore: the previous value is saved in a
    transaction-local custom setting and put back, so nothing leaks into later statements or
    the pooled connection (if an autocommit connection ended the transaction in between, the
setting already ended with it and the restore keeps the current value). Why: psycopg prepares a statement after 5 runs and PostgreSQL may
    then keep a generic plan that knows neither the agent's size nor the words' frequencies —
    the capped IDF counts took ~20 ms instead of ~3 ms at 100k facts (ADR 0006). Other
    statements (the linked-facts lookup) are faster with their generic plan, hence the scope. A plan
    never changes a result here: every query orders by a total key."""
    with _batch(conn):
        conn.execute(
            "SELECT set_config('engramdb.saved_plan_cache_mode', current_setting('plan_cache_mode'), true),"
            " set_config('plan_cache_mode', 'force_custom_plan', true)"
        )
        yield
        _restore_plans(conn)


@contextmanager
def _batch(conn: Any) -> Iterator[None]:
    """psycopg pipeline mode when the connection supports it: statements issued inside are
    sent together and answered in one round trip (results are read after the block)."""
    pipeline = getattr(conn, "pipeline", None)
    if pipeline is None:
        yield
        return
    with pipeline():
        yield


def nearest_cte(table: str, alias: str, id_col: str, where: str, exact_rows: int) -> str:
    """``nn AS MATERIALIZED (…)``: the ``LIMIT %(n)s`` nearest rows of the agent, (id, d).

    ``exact_rows > 0`` adds an exact branch (ORDER BY the distance over the agent's rows via
    the btree, ties by id) taken when the agent has at most ``exact_rows`` rows in ``table``
    — decided inside the statement by a capped count (one-time filters), so deterministic
    for the same data. A small agent in a large shared table otherwise makes the filtered
    HNSW walk thousands of pages (ADR-0006); the exact branch returns the true nearest rows,
    which the approximate search only estimates, so it can change the candidate set."""
    a = alias
    hnsw = (f"SELECT {a}.{id_col}, {a}.embedding <=> %(q)s::vector AS d FROM {table} {a}"
            f" WHERE {{gate}}{a}.agent_id = %(a)s AND {where} AND {a}.embedding IS NOT NULL"
            f" ORDER BY {a}.embedding <=> %(q)s::vector LIMIT %(n)s")
    if exact_rows <= 0:
        return f"nn AS MATERIALIZED ({hnsw.format(gate='')})"
    exact = (f"SELECT {a}.{id_col}, {a}.embedding <=> %(q)s::vector AS d FROM {table} {a}"
             f" WHERE (SELECT small FROM cnt) AND {a}.agent_id = %(a)s AND {where} AND {a}.embedding IS NOT NULL"
             f" ORDER BY ({a}.embedding <=> %(q)s::vector) + 0, {a}.{id_col} LIMIT %(n)s")
    return (
        f"cnt AS MATERIALIZED (SELECT count(*) <= {int(exact_rows)} AS small FROM"
        f" (SELECT 1 FROM {table} WHERE agent_id = %(a)s LIMIT {int(exact_rows) + 1}) c),"
        f" nn AS MATERIALIZED (({exact}) UNION ALL ({hnsw.format(gate='NOT (SELECT small FROM cnt) AND ')}))"
    )


def semantic_facts(
    conn: Any,
    agent_id: str,
    qvec: str,
    cfg: RetrieveConfig,
    floor: float,
    as_of: datetime | None,
    exact_rows: int = 0,
) -> list[tuple[str, float]]:
    """(fact_id, cosine) of the nearest facts above the similarity threshold, HNSW order
    (exact below ``exact_rows`` rows of the agent, see ``nearest_cte``)."""
    limit = cfg.candidate_pool
    where = f"{fact_visibility(as_of)} AND f.confidence >= %(minc)s"
    with _batch(conn):  # the settings and the search travel in one round trip
        _set_hnsw(conn, max(cfg.hnsw_ef_search, limit))
        cur = conn.execute(
            f"WITH {nearest_cte('mem_facts', 'f', 'fact_id', where, exact_rows)}"
            " SELECT fact_id, 1 - d FROM nn WHERE d <= %(maxd)s ORDER BY d, fact_id",
            {
                "q": qvec,
                "a": agent_id,
                "t": as_of,
                "minc": cfg.min_confidence,
                "n": limit,
                "maxd": 1.0 - similarity_threshold(cfg, floor),
            },
        )
    return [(r[0], float(r[1])) for r in cur.fetchall()]


FTS_CONFIG = "simple"  # language-neutral: facts stay in the user's language


def tsquery_text(words: list[str]) -> str:
    """OR of whole-word lexemes for ``to_tsquery``. Whole words, not prefixes: a prefix
    query makes PostgreSQL recheck ``to_tsvector`` on every candidate row (3× slower at 100k
    facts). Words are ``\\w+`` tokens; quotes/backslashes are escaped anyway (tsquery syntax,
    still a bound parameter)."""
    return " | ".join("'" + w.replace("\\", "\\\\").replace("'", "''") + "'" for w in words)


def _match_count(column: str, n: int) -> str:
    """``(col ILIKE p0)::int·w0 + …``: the IDF-weighted count of query words found (divided
    by ``%(k)s`` = the sum of the weights, it is the weighted *fraction* of words found)."""
    return "(" + " + ".join(f"({column} ILIKE %(p{i})s)::int * %(w{i})s" for i in range(n)) + ")::float8"


DF_CAP = 2000
N_CAP = 10000


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
    with _custom_plans(conn):
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


def _keyword_filter(column: str, mode: str) -> str:
    """Candidate filter: trigram/seq-scan ILIKE, or the full-text GIN index when present
    (``mode='fts'``: words and word prefixes; the score is still the exact ILIKE fraction)."""
    if mode == "fts":
        return f"to_tsvector('{FTS_CONFIG}', {column}) @@ to_tsquery('{FTS_CONFIG}', %(tsq)s)"
    return f"{column} ILIKE ANY(%(p)s::text[])"


def keyword_facts(
    conn: Any, agent_id: str, words: list[str], cfg: RetrieveConfig, as_of: datetime | None, mode: str = "ilike"
) -> list[tuple[str, float]]:
    """(fact_id, fraction of the keyword words found in its text), best first."""
    if not words:
        return []
    params = {**keyword_params(conn, "mem_facts", "fact_text", agent_id, words, mode), "t": as_of,
              "minc": cfg.min_confidence, "n": cfg.candidate_pool}
    with _custom_plans(conn):
        cur = conn.execute(
            f"""
        SELECT f.fact_id,
               {_match_count("f.fact_text", len(words))} / %(k)s AS s
          FROM mem_facts f
         WHERE f.agent_id = %(a)s AND {fact_visibility(as_of)}
           AND f.confidence >= %(minc)s AND {_keyword_filter("f.fact_text", mode)}
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


def aggregation_facts(
    conn: Any, agent_id: str, patterns: list[str], cfg: RetrieveConfig, as_of: datetime | None
) -> list[tuple[str, float]]:
    """Facts about entities of the aggregated types (``person:%``), most reinforced and
    important first. ``patterns`` come from the planner (never from user text). The score is
    the entity's specificity: "who are my friends?" is about the other people, not about the
    user (or a speaker), whose facts are in every other row — unweighted, those flooded the
    ranking (ADR 0006)."""
    if not patterns:
        return []
    rows = conn.execute(
        f"""
        SELECT f.fact_id, f.entity_key FROM mem_facts f
         WHERE f.agent_id = %(a)s AND f.entity_key LIKE ANY(%(p)s::text[]) AND {fact_visibility(as_of)}
           AND f.confidence >= %(minc)s
         ORDER BY f.reinforcement_count DESC, f.importance DESC, f.valid_from DESC, f.fact_id
         LIMIT %(n)s
        """,
        {"a": agent_id, "p": patterns, "t": as_of, "minc": cfg.min_confidence, "n": cfg.candidate_pool},
    ).fetchall()
    specific = entity_specificity(conn, agent_id, sorted({r[1] for r in rows}))
    return [(r[0], specific.get(r[1], 1.0)) for r in rows]


# ----- graph ----------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphNode:
    key: str
    hop: int  # BFS distance from a query entity (0 = named in the query)
    edge_strength: float  # 1.0 at hop 0; normalised strength of the path's edges
    edge_seen: datetime | None  # last_seen_at of the edge that reached it
    in_query: bool


@dataclass(frozen=True)
class GraphHit:
    fact_id: str
    node: GraphNode
    structural: float  # edge_strength × edge_recency × query_bonus × hop_decay (recency of the fact applied in rank)


def strength_factor(strength: float) -> float:
    """A co-mention count-like ``strength`` (1.0 on first sight) onto (0, 1]: 0.75 once, 1.0
    from the second co-mention on."""
    return max(0.0, min(1.0, 0.5 + 0.25 * strength))


def bfs(
    conn: Any,
    agent_id: str,
    seeds: dict[str, bool],
    first_edges: list[Edge],
    hops: int,
    as_of: datetime | None,
    per_entity: int,
) -> dict[str, GraphNode]:
    """BFS over relationships (both directions) up to ``hops``; ``seeds`` maps entity key to
    "named in the query". ``first_edges`` (loaded by the planner) saves the first round trip."""
    nodes = {k: GraphNode(k, 0, 1.0, None, in_q) for k, in_q in seeds.items()}
    frontier = sorted(seeds)
    for hop in range(1, hops + 1):
        if not frontier:
            break
        if hop == 1 and first_edges:
            known = {e.seed for e in first_edges}
            edges = [e for e in first_edges if e.seed in seeds]
            missing = [k for k in frontier if k not in known]
            if missing:
                edges += load_edges(conn, agent_id, missing, as_of, per_entity)[0]
        else:
            edges = load_edges(conn, agent_id, frontier, as_of, per_entity)[0]
        nxt: dict[str, GraphNode] = {}
        for e in sorted(edges, key=lambda e: (e.seed, -e.strength, e.neighbour)):
            if e.neighbour in nodes:
                continue
            parent = nodes[e.seed]
            cand = GraphNode(e.neighbour, hop, parent.edge_strength * strength_factor(e.strength), e.last_seen_at, False)
            best = nxt.get(e.neighbour)
            if best is None or cand.edge_strength > best.edge_strength:
                nxt[e.neighbour] = cand
        nodes.update(nxt)
        frontier = sorted(nxt)
    return nodes


def _linked_facts_cursor(
    conn: Any,
    agent_id: str,
    keys: list[str],
    per_entity: int | list[int],
    cfg: RetrieveConfig,
    as_of: datetime | None,
    order: str = "recent",
) -> Any:
    """(entity_key, fact_id) for facts that *mention* each entity through the fact↔entity
    link table (not only the primary subject); falls back to ``entity_key`` matching when
    the agent has no links at all (memories projected before links existed).
    ``per_entity`` is one limit for all keys or one per key."""
    limits = per_entity if isinstance(per_entity, list) else [per_entity] * len(keys)
    pairs = [(k, n) for k, n in zip(keys, limits, strict=True) if n > 0]
    if not pairs:
        return None
    keys, limits = [k for k, _ in pairs], [n for _, n in pairs]
    order_sql = (
        "f.valid_from DESC, f.fact_id"
        if order == "recent"
        else "f.importance DESC, f.reinforcement_count DESC, f.valid_from DESC, f.fact_id"
    )
    # whether the agent has links at all is decided inside the statement (one-time filter),
    # not by a separate round trip
    inner = f"""
        (SELECT f.fact_id, f.valid_from, f.importance, f.reinforcement_count
           FROM mem_fact_entities fe
           JOIN mem_facts f ON f.agent_id = fe.agent_id AND f.fact_id = fe.fact_id
          WHERE (SELECT v FROM hl) AND fe.agent_id = %(a)s AND fe.entity_key = k.key
            AND {fact_visibility(as_of)} AND f.confidence >= %(minc)s
          ORDER BY {order_sql} LIMIT k.lim)
        UNION ALL
        (SELECT f.fact_id, f.valid_from, f.importance, f.reinforcement_count
           FROM mem_facts f
          WHERE NOT (SELECT v FROM hl) AND f.agent_id = %(a)s AND f.entity_key = k.key
            AND {fact_visibility(as_of)} AND f.confidence >= %(minc)s
          ORDER BY {order_sql} LIMIT k.lim)"""
    return conn.execute(
        "WITH hl AS (SELECT EXISTS (SELECT 1 FROM mem_fact_entities WHERE agent_id = %(a)s) AS v) "
        f"SELECT k.key, x.fact_id FROM unnest(%(k)s::text[], %(n)s::int[]) AS k(key, lim) CROSS JOIN LATERAL ({inner}) x",
        {"a": agent_id, "k": keys, "t": as_of, "minc": cfg.min_confidence, "n": limits},
    )


def linked_with_specificity(
    conn: Any,
    agent_id: str,
    keys: list[str],
    per_entity: int | list[int],
    cfg: RetrieveConfig,
    as_of: datetime | None,
    order: str = "recent",
) -> tuple[list[tuple[str, str]], dict[str, float]]:
    """The linked facts (``_linked_facts_cursor``) and ``entity_specificity`` of the same keys, sent together in one
    round trip (pipeline): graph and spreading need both and neither depends on the other."""
    with _batch(conn):
        spec_cur = _specificity_cursor(conn, agent_id, keys)
        linked_cur = _linked_facts_cursor(conn, agent_id, keys, per_entity, cfg, as_of, order)
    specific = _specificity_from(spec_cur.fetchall()) if spec_cur is not None else {}
    linked = [(r[0], r[1]) for r in linked_cur.fetchall()] if linked_cur is not None else []
    return linked, specific


def entity_specificity(conn: Any, agent_id: str, keys: list[str]) -> dict[str, float]:
    """How much being linked to an entity says about a fact: the entity's IDF over the
    agent's facts, scaled to [0, 1] (1 = an entity with one fact). Without it, naming a hub
    (the user, a speaker every other fact is about) promoted all of its facts alike: graph and
    spreading then cost LoCoMo Recall@10 more than half (62 → 31, ADR 0006)."""
    cur = _specificity_cursor(conn, agent_id, keys)
    return {} if cur is None else _specificity_from(cur.fetchall())


def _specificity_cursor(conn: Any, agent_id: str, keys: list[str]) -> Any:
    if not keys:
        return None
    return conn.execute(
        f"""
        SELECT k.key,
               (SELECT count(*) FROM (SELECT 1 FROM mem_fact_entities l
                                       WHERE l.agent_id = %(a)s AND l.entity_key = k.key
                                       LIMIT {DF_CAP}) x),
               (SELECT count(*) FROM (SELECT 1 FROM mem_facts f WHERE f.agent_id = %(a)s
                                       LIMIT {N_CAP}) y)
          FROM unnest(%(keys)s::text[]) AS k(key)
        """,
        {"a": agent_id, "keys": keys},
    )


def _specificity_from(rows: list[tuple[Any, ...]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, linked, total in rows:
        if not linked:
            out[key] = 1.0  # no links (entity_key fallback): nothing to measure
            continue
        best = math.log(1.0 + (total - 1 + 0.5) / 1.5)
        idf = math.log(1.0 + (total - linked + 0.5) / (linked + 0.5))
        out[key] = max(0.0, min(1.0, idf / best)) if best > 0 else 1.0
    return out


def graph_facts(
    conn: Any,
    agent_id: str,
    seeds: dict[str, bool],
    first_edges: list[Edge],
    cfg: RetrieveConfig,
    as_of: datetime | None,
    anchor: datetime,
    broad: bool,
) -> tuple[list[GraphHit], dict[str, GraphNode]]:
    if not seeds:
        return [], {}
    nodes = bfs(conn, agent_id, seeds, first_edges, cfg.graph_hops, as_of, cfg.graph_neighbours_per_entity)
    # budget: the named entities get graph_facts_per_entity facts, each hop a quarter of the
    # previous hop's share (20 / 5 / 1 by default), broad queries × broad_query_multiplier
    base = cfg.graph_facts_per_entity * (cfg.broad_query_multiplier if broad else 1)
    keys = sorted(nodes)
    limits = [max(1, base // (4 ** nodes[k].hop)) for k in keys]
    best: dict[str, GraphHit] = {}
    linked, specific = linked_with_specificity(conn, agent_id, keys, limits, cfg, as_of)
    for key, fact_id in linked:
        node = nodes[key]
        edge_recency = 1.0 if node.hop == 0 else floored_decay(anchor, node.edge_seen, cfg.recency_half_life_days)
        bonus = cfg.graph_query_bonus if node.in_query else 1.0
        structural = (node.edge_strength * edge_recency * bonus * cfg.hop_decay(node.hop)
                      * specific.get(key, 1.0))
        hit = GraphHit(fact_id, node, structural)
        cur = best.get(fact_id)
        if cur is None or (hit.structural, -hit.node.hop) > (cur.structural, -cur.node.hop):
            best[fact_id] = hit
    hits = sorted(best.values(), key=lambda h: (-h.structural, h.fact_id))
    return hits[: cfg.candidate_pool * (cfg.broad_query_multiplier if broad else 2)], nodes


def decay(anchor: datetime, when: datetime | None, half_life_days: float) -> float:
    """exp decay 0.5^(age/half_life); future or unknown times count as age 0."""
    if when is None:
        return 1.0
    age_days = max(0.0, (anchor - when).total_seconds() / 86400.0)
    return float(0.5 ** (age_days / half_life_days))


def floored_decay(anchor: datetime, when: datetime | None, half_life_days: float) -> float:
    """Recency as a *factor* inside the graph score: 0.5 + 0.5·decay, so an old fact about
    the entity the user names is still found (recency is ranked separately anyway)."""
    return 0.5 + 0.5 * decay(anchor, when, half_life_days)


# ----- messages ("Relevant conversations") ---------------------------------------------


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
                SELECT m.message_id, {_match_count("m.text", len(words))} / %(k)s AS s
                  FROM mem_messages m
                 WHERE m.agent_id = %(a)s AND {message_visibility(as_of)} AND {_keyword_filter("m.text", mode)}
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
    with _batch(conn):
        if qvec is not None:
            _set_hnsw(conn, max(cfg.hnsw_ef_search, limit))
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


@dataclass(frozen=True)
class FactRow:
    fact_id: str
    entity_key: str
    entity_name: str
    fact_text: str
    confidence: float
    importance: float
    reinforcement_count: int
    valid_from: datetime
    source_message_ids: list[str]
    cosine: float | None


def hydrate_facts(conn: Any, agent_id: str, ids: list[str], qvec: str | None) -> dict[str, FactRow]:
    """Rows for candidate ids, with their cosine to the query computed in SQL (so facts found
    by keyword/graph/spreading get a semantic score too, without shipping vectors)."""
    if not ids:
        return {}
    rows = conn.execute(
        """
        SELECT f.fact_id, f.entity_key, coalesce(e.display_name, f.entity_key), f.fact_text,
               f.confidence, f.importance, f.reinforcement_count, f.valid_from,
               f.source_message_id, f.source_message_ids,
               CASE WHEN f.embedding IS NULL OR %(q)s::vector IS NULL THEN NULL
                    ELSE 1 - (f.embedding <=> %(q)s::vector) END
          FROM mem_facts f
          LEFT JOIN mem_entities e ON e.agent_id = f.agent_id AND e.entity_key = f.entity_key
         WHERE f.agent_id = %(a)s AND f.fact_id = ANY(%(ids)s)
        """,
        {"a": agent_id, "ids": ids, "q": qvec},
    ).fetchall()
    out: dict[str, FactRow] = {}
    for fid, ekey, ename, text, conf, imp, rc, vfrom, src, srcs, cos in rows:
        sources = list(srcs or [])
        if src and src not in sources:
            sources.insert(0, src)
        out[fid] = FactRow(fid, ekey, ename, text, float(conf), float(imp), int(rc), vfrom, sources,
                           None if cos is None else float(cos))
    return out


def patterns_for(
    conn: Any, agent_id: str, fact_ids: list[str], words: list[str], limit: int, as_of: datetime | None
) -> list[tuple[str, str, float, list[str], int]]:
    """Meta-observations supported by the returned facts or matching the keywords:
    (pattern_id, text, confidence, supporting_fact_ids, overlap)."""
    if limit <= 0 or (not fact_ids and not words):
        return []
    patterns = [f"%{escape_like(w)}%" for w in words] or ["\x01never"]
    return matching_patterns(conn, agent_id, fact_ids, patterns, limit, as_of)
