"""What every signal's SQL shares: the visibility predicates (now / as of), LIKE
escaping, the similarity threshold, the HNSW and plan-cache settings, one
round-trip batching and the nearest-neighbour CTE. User text only ever reaches SQL as a bound
parameter; LIKE patterns are escaped."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

# re-exported for the signals: its home is infra.pgsql, so management needs no retrieve import
from engramdb.infra.pgsql import escape_like as escape_like
from engramdb.services.retrieve.config import RetrieveConfig

# Count caps of the IDF lookups (keyword weights, entity specificity): the counts stay cheap.
DF_CAP = 2000
N_CAP = 10000


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


TURN_ALIAS = "\x00turn\x00"  # the turn alias placeholder inside a compiled narrowing


@dataclass(frozen=True)
class Narrowing:
    """A retrieve narrowed to some turns (``services/retrieve/scope.py`` compiles it from a
    ``RetrieveFilter``, ADR-0047): a predicate over one turn, with its bound parameters.

    A turn passes when it satisfies the predicate; a fact passes when ONE of its source turns
    does. The visibility helpers below AND it into every candidate statement's WHERE clause,
    under its ORDER BY / LIMIT — never a filter after the top k. Its parameters are named
    ``nw*`` / ``mf*``, which no statement uses otherwise. ``selective``: few turns pass (a
    capped count, ``scope.probe``) — nearest-row searches then take the exact branch over
    the passing rows instead of an HNSW walk that would skip most of what it visits."""

    turn_sql: str
    params: Mapping[str, Any] = field(default_factory=dict)
    selective: bool = False
    # the passing turns are few enough to search exactly, though their facts are not
    # (``scope.EXACT_TURNS``; implied by ``selective``): see ``exact_turns_when_few``
    few_turns: bool = False
    # selective, its passing turns lie sparse in the sessions they touch (``scope.probe``):
    # a walk of the session-order index tests their ids (``listed_turns``)
    sparse_turns: bool = False

    def turn(self, alias: str) -> str:
        return self.turn_sql.replace(TURN_ALIAS, alias)

    def fact(self, alias: str) -> str:
        """Selective: the fact is one of those drawn from a passing turn, listed once per call
        by ``scope.probe`` (``nwf``, a hashed subplan test per row the statement reads).
        Else one probe of the turns' primary key per row the statement visits, which a broad
        filter passes at once.

        Why not ``fact_id = ANY(%(nwf)s)``: a constant array in a WHERE clause is estimated
        element by element when the statement is planned — ~2 ms per statement for the 2000
        ids of a 2 % filter at 100k facts, several statements per call (ADR-0047); a list
        behind a subquery is a parameter to the planner (~0.1 ms).

        ``copied`` (the filter is one containment of a turn's scope): the fact's own copy of
        its source turns' session and metadata, in the row — neither a list nor a probe.
        Written as a ``coalesce`` so that no plan takes its GIN index for a row test (a
        generic plan would estimate it at 1 % and sort a broad filter's half of the rows
        instead of walking the HNSW index); ``fact_by_key`` is the indexable form."""
        if self.copied:
            return f"coalesce({self._copy_contains(alias)}, false)"
        if self.selective:
            return f"{alias}.fact_id IN (SELECT unnest(%(nwf)s::text[]))"
        return f"EXISTS ({self._source_turn(alias)})"

    @property
    def copied(self) -> bool:
        """Facts are tested on their ``source_scope`` copy (``scope.scope_containments``)."""
        return "nwc" in self.params

    @property
    def keyed(self) -> bool:
        """Copied, and each of its elements is one key of a fact's ``scope_keys``
        (``projections/scope_keys.py``): a session, or one string or boolean value."""
        return self.copied and "nwk" in self.params

    def _copy_contains(self, alias: str) -> str:
        """The copy contains one of the filter's elements (``nwc``, ``nwc_1``, …): ORed
        containments, which a bitmap scan answers as an OR of GIN lookups."""
        names = [name for name in copy_param_names(len(self.params)) if name in self.params]
        return " OR ".join(f"{alias}.source_scope @> %({name})s::jsonb" for name in names)

    def fact_by_key(self, alias: str) -> str:
        """``fact`` for a statement the listed ids should drive (the exact nearest rows over
        them): ``fact_id = ANY`` of the list as one runtime value, which the primary key
        looks up id by id, planned without reading the ids (see ``fact``). Copied and
        selective: the containment itself, which the GIN index of ``source_scope`` finds —
        one bitmap of the passing facts, read in page order (2000 facts: 2.7 ms against a
        listing of 4.6–5.3 ms and a read by key of 4.6–5.1 ms, ADR-0047); ``keyed``: the
        overlap of its keys, which the exact index of ``scope_keys`` finds without re-testing
        each row (ten sessions' 10,000 facts: 17.8 → 5.5 ms for the nearest 60)."""
        if self.copied:
            if not self.selective:
                return self.fact(alias)
            if self.keyed:  # the same facts by the exact keys' index: no row re-tested
                return f"{alias}.scope_keys && %(nwk)s::text[]"
            return f"({self._copy_contains(alias)})"
        if self.selective:
            return f"{alias}.fact_id = ANY((SELECT %(nwf)s::text[])::text[])"
        return self.fact(alias)

    @cached_property
    def listed(self) -> frozenset[str] | None:
        """The listed fact ids of a selective narrowing (``None`` otherwise), to test rows
        already fetched by id in Python instead of in their statement."""
        return frozenset(self.params.get("nwf") or ()) if self.selective and not self.copied else None

    def listed_turns(self) -> Narrowing | None:
        """A selective narrowing whose passing turns are listed (``nwt``), as a narrowing that
        tests a turn's id against that list instead of its session and metadata (``None``
        otherwise). Why: the test then reads only the turn's key, so a walk of an index
        holding the key (``tail_lists.neighbours``, the session-order index) can skip the
        turns that do not pass without reading their rows — a rare filter spread over every
        session read ~50 rows per passing neighbour (ADR-0047). The list is the probe's when
        it listed the facts too (read once per call, like ``nwf``: a turn projected after the
        probe is left out), else the walk's own (``with_listed_turns``)."""
        if not self.selective or "nwt" not in self.params:
            return None
        # ``IS TRUE``: a hashed subplan, built once per statement; a bare ``IN`` was pulled up
        # into a semi-join that hashed the list again for every anchor (4.0 vs 2.6 ms)
        return Narrowing(f"({TURN_ALIAS}.message_id IN (SELECT unnest(%(nwt)s::text[]))) IS TRUE",
                         self.params, True, sparse_turns=True)

    @property
    def lists_turns_late(self) -> bool:
        """Selective and sparse, its passing turns not listed by the probe (a ``copied``
        verdict, kept across calls by ``BroadVerdicts``): the neighbour walk reads them."""
        return self.selective and self.sparse_turns and "nwt" not in self.params

    def with_listed_turns(self, turn_ids: list[str]) -> Narrowing:
        """This narrowing with its passing turns listed (``nwt``, for ``listed_turns``)."""
        return Narrowing(self.turn_sql, {**self.params, "nwt": turn_ids}, self.selective, self.few_turns,
                         self.sparse_turns)

    def fact_late(self, alias: str) -> str:
        """``fact``'s per-row probe as a ``late_probe``, for rows read in a fenced order."""
        return late_probe(self._source_turn(alias))

    def _source_turn(self, alias: str) -> str:
        return (f"SELECT true FROM mem_messages nw WHERE nw.agent_id = {alias}.agent_id"
                f" AND nw.message_id = ANY({alias}.source_message_ids) AND {self.turn('nw')}")



def copy_param_names(count: int) -> list[str]:
    """The parameter names of a narrowing's ``count`` copy elements: ``nwc``, ``nwc_1``, …"""
    return [f"nwc_{i}" if i else "nwc" for i in range(count)]


def late_probe(select_true: str) -> str:
    """A per-row test to run on rows that come in a fenced order (``… ORDER BY … OFFSET 0) s
    WHERE <test> LIMIT n``), as a scalar subquery: an ``EXISTS`` there may be pulled up into a
    semi-join, and a hashed semi-join need not keep the order — LIMIT then keeps rows that are
    not the best (seen with BM25's scored rows). A scalar subplan is a filter on the ordered
    scan, evaluated row by row until LIMIT is met."""
    return f"coalesce(({select_true} LIMIT 1), false)"


def exact_when_selective(small: bool | None, scope: Narrowing | None) -> bool | None:
    """``nearest_cte``'s ``small``: the exact branch when the narrowing is selective (its few
    rows are sorted by distance), else the size gate's verdict."""
    return True if scope is not None and scope.selective else small


def exact_turns_when_few(small: bool | None, scope: Narrowing | None) -> bool | None:
    """``nearest_cte``'s ``small`` for a search of turns: the exact branch when the narrowing
    is selective or its passing turns are few (``Narrowing.few_turns``), else the size
    gate's verdict. Why turns apart from facts: a turn search reads only the turns, which
    the session index (or the metadata GIN index) finds directly, ~1.5 µs a row, while a
    fact's test is a recheck of its scope copy on a scattered row, ~2–3 µs. Ten sessions of
    100 at 100k facts (5,000 turns, 10,000 facts): the turns' exact search 7.6 ms against
    12.5 ms walked, the facts' 22 ms against 13 ms (ADR-0047)."""
    return True if scope is not None and (scope.selective or scope.few_turns) else small


def narrowing_params(scope: Narrowing | None) -> dict[str, Any]:
    """The narrowing's bound parameters, to merge into a statement's (none without one)."""
    return {} if scope is None else dict(scope.params)


def fact_visibility(as_of: datetime | None, alias: str = "f", scope: Narrowing | None = None) -> str:
    """Facts retrieval may show now (or as of ``as_of``); with ``scope``, only those one of
    whose source turns passes it. Without one the SQL is exactly what it always was."""
    visible = _active_now(alias) if as_of is None else _active_at(alias)
    return visible if scope is None else f"{visible} AND {scope.fact(alias)}"


def fact_scope_split(as_of: datetime | None, scope: Narrowing | None,
                     alias: str = "f") -> tuple[str, str, str]:
    """``(where, late, late_cols)`` for ``nearest_cte`` over facts: a selective (or no)
    narrowing stays in ``where`` as ``fact_visibility`` writes it; a broad one's per-row probe
    becomes ``late`` (tested in distance order, see ``nearest_cte``)."""
    if scope is None:
        return fact_visibility(as_of, alias), "", ""
    if scope.selective or scope.copied:  # a copied test is a column of the row: no probe to defer
        return f"{fact_visibility(as_of, alias)} AND {scope.fact_by_key(alias)}", "", ""
    return (fact_visibility(as_of, alias), scope.fact_late(alias),
            f", {alias}.agent_id, {alias}.source_message_ids")


def message_visibility(as_of: datetime | None, alias: str = "m", scope: Narrowing | None = None) -> str:
    """Turns retrieval may show: not hidden by a retraction of a fact they sourced, nor by
    "forget the agent" (ADR-0016) — as of ``t``, only what was hidden by ``t`` counts.

    Written for the agent of ``%(a)s`` (every caller filters ``{alias}.agent_id = %(a)s``): the
    hidden turns as one hashed list and the latest "forget" as one value, each read once per
    statement, instead of two correlated ``NOT EXISTS`` probes per candidate row (~15 % of the
    turns' statement at 100k, ADR-0038). Same rows: ``message_id`` is never NULL, and a turn
    without ``recorded_at`` stays visible as before."""
    m = alias
    by_t = "" if as_of is None else " AND h.hidden_at <= %(t)s"
    forgotten_by_t = "" if as_of is None else " AND g.forgotten_at <= %(t)s"
    hidden = (
        f"{m}.message_id NOT IN (SELECT h.message_id FROM mem_hidden_messages h"
        f" WHERE h.agent_id = %(a)s{by_t}) "
        f"AND coalesce({m}.recorded_at > (SELECT max(g.forgotten_at) FROM mem_forgotten g"
        f" WHERE g.agent_id = %(a)s{forgotten_by_t}), true)"
    )
    if scope is not None:
        hidden = f"{hidden} AND {scope.turn(m)}"
    if as_of is None:
        return hidden
    return f"{m}.occurred_at <= %(t)s AND {m}.recorded_at <= %(t)s AND {hidden}"






def similarity_threshold(cfg: RetrieveConfig, floor: float) -> float:
    """Raw cosine matching ``min_similarity`` on the calibrated scale."""
    return floor + cfg.filters.min_similarity * (1.0 - floor)


HNSW_EF_SEARCH_MAX = 1000  # pgvector's upper bound for hnsw.ef_search


def set_hnsw(conn: Any, ef_search: int) -> None:
    # set_config(..., true) is SET LOCAL: it ends with this transaction, never leaks into the
    # pooled connection. relaxed_order lets the per-agent filter not starve the HNSW scan.
    # No parallel workers: launching them costs ~10 ms, more than any 60-row search here (and
    # the planner would launch them even for the exact branch that a one-time filter skips).
    # Custom plans: a generic plan (psycopg prepares after 5 runs) does not know the agent's
    # size and once picked a sort-all plan at 100k facts (~400 ms).
    conn.execute(
        "SELECT set_config('hnsw.ef_search', %s, true), set_config('hnsw.iterative_scan', 'relaxed_order', true),"
        " set_config('max_parallel_workers_per_gather', '0', true), set_config('plan_cache_mode', 'force_custom_plan', true)",
        (str(max(1, min(ef_search, HNSW_EF_SEARCH_MAX))),),
    )


@contextmanager
def local_settings(conn: Any, settings: Mapping[str, str]) -> Iterator[None]:
    """Statements issued inside run with these planner ``settings``, sent in ONE round trip
    (pipeline) with the settings and their restore: each previous value is saved in a
    transaction-local custom setting (``engramdb.saved_<name>``) and put back, so nothing
    leaks into later statements or the pooled connection (if an autocommit connection ended
    the transaction in between, the settings already ended with it and the restore keeps the
    current values). A plan never changes a result here: every query orders by a total key."""
    names = list(settings)
    with batch(conn):
        conn.execute(
            "SELECT " + ", ".join(f"set_config('engramdb.saved_{n}', current_setting('{n}'), true),"
                                  f" set_config('{n}', %s, true)" for n in names),
            [settings[n] for n in names],
        )
        yield
        conn.execute("SELECT " + ", ".join(
            f"set_config('{n}', coalesce(nullif(current_setting('engramdb.saved_{n}', true), ''),"
            f" current_setting('{n}')), true)" for n in names))


def custom_plans(conn: Any) -> AbstractContextManager[None]:
    """``plan_cache_mode = force_custom_plan`` for the statements issued inside
    (``local_settings``). Why: psycopg prepares a statement after 5 runs and PostgreSQL may
    then keep a generic plan that knows neither the agent's size nor the words' frequencies —
    the capped IDF counts took ~20 ms instead of ~3 ms at 100k facts (ADR 0006). Other
    statements (the linked-facts lookup) are faster with their generic plan, hence the scope."""
    return local_settings(conn, {"plan_cache_mode": "force_custom_plan"})


def index_order_only(conn: Any) -> AbstractContextManager[None]:
    """No bitmap scans for the statements issued inside (``local_settings``): a walk that
    should read rows in an index's order until its LIMIT is met can then not be planned as a
    bitmap of every matching row plus a sort. Why: a narrowed neighbour walk
    (``tail_lists.neighbours``) was planned either way depending on how the plan guessed the
    filter's rows — a generic plan took the metadata GIN index + a sort of the session (5.3
    vs 1.0 ms at 10k facts), a custom one the same when the passing turns cluster in a few
    sessions (~11 ms at 100k) — while the ordered walk never reads more than the session's
    rows either way."""
    return local_settings(conn, {"enable_bitmapscan": "off"})


@contextmanager
def batch(conn: Any) -> Iterator[None]:
    """psycopg pipeline mode when the connection supports it: statements issued inside are
    sent together and answered in one round trip (results are read after the block)."""
    pipeline = getattr(conn, "pipeline", None)
    if pipeline is None:
        yield
        return
    with pipeline():
        yield


# a broad narrowing's exact branch first reads this many times ``n`` nearest rows (``nearest_cte``)
LATE_HEAD = 4


def agent_test(alias: str, scope: Narrowing | None) -> str:
    """``alias.agent_id = %(a)s``; under a copied selective narrowing spelt so that no index
    takes it. Why: its facts are found by the GIN index of their ``source_scope`` (an OR of
    containments), and the planner, seeing several thousand of them, ANDed that bitmap with
    one of every active fact of the agent — 7 of a 31 ms read at 100k facts, six sessions
    passing (6000 facts) — to spare the sixth of the heap rows other agents hold."""
    if scope is not None and scope.copied and scope.selective:
        return f"({alias}.agent_id = %(a)s) IS TRUE"
    return f"{alias}.agent_id = %(a)s"


def nearest_cte(table: str, alias: str, id_col: str, where: str, exact_rows: int,
                small: bool | None = None, extra: str = "", late: str = "",
                late_cols: str = "", agent: str | None = None) -> str:
    """``nn AS MATERIALIZED (…)``: the ``LIMIT %(n)s`` nearest rows of the agent, (id, d).

    ``exact_rows > 0`` adds an exact branch (ORDER BY the distance over the agent's rows via
    the btree, ties by id) taken when the agent has at most ``exact_rows`` rows in ``table``
    — decided inside the statement by a capped count (one-time filters), so deterministic
    for the same data. A small agent in a large shared table otherwise makes the filtered
    HNSW walk thousands of pages (ADR-0006); the exact branch returns the true nearest rows,
    which the approximate search only estimates, so it can change the candidate set.
    ``small`` is that count's verdict when the caller already knows it (``size_gate``): the
    statement is then the one branch the count would have chosen, without the count
    (~2 ms per statement at 100k rows, ADR-0038). ``extra``: more output columns of the same
    row (``, expr AS name``), so a caller needs no second lookup of the rows it found.

    ``late``: one more condition on the row (a broad narrowing's per-row probe, ADR-0047),
    tested in the HNSW walk's WHERE like ``where``, but in the exact branch only on the rows
    in distance order until ``LIMIT`` of them pass — the same rows as testing it first (the
    order is total), for a sort of the agent's (id, d) plus a probe per row read instead of a
    probe per row of the agent (measured at 10k facts, half passing: 43 → ~16 ms).
    ``late_cols``: the row's columns ``late`` reads (``, f.agent_id, f.source_message_ids``),
    carried through the sort under the same alias. ``agent``: the agent's test
    (``agent_test``), ``alias.agent_id = %(a)s`` by default."""
    a = alias
    agent = agent or f"{a}.agent_id = %(a)s"
    where_all = f"{where} AND {late}" if late else where
    hnsw = (f"SELECT {a}.{id_col}, {a}.embedding <=> %(q)s::vector AS d{extra} FROM {table} {a}"
            f" WHERE {{gate}}{agent} AND {where_all} AND {a}.embedding IS NOT NULL"
            f" ORDER BY {a}.embedding <=> %(q)s::vector LIMIT %(n)s")
    if exact_rows <= 0 or small is False:
        return f"nn AS MATERIALIZED ({hnsw.format(gate='')})"
    exact = (f"SELECT {a}.{id_col}, {a}.embedding <=> %(q)s::vector AS d{extra} FROM {table} {a}"
             f" WHERE {{gate}}{agent} AND {where} AND {a}.embedding IS NOT NULL"
             f" ORDER BY ({a}.embedding <=> %(q)s::vector) + 0, {a}.{id_col} LIMIT %(n)s")
    if late:
        # OFFSET 0 keeps ``late`` out of the sorted subquery (no qual push-down): the rows
        # come sorted, ``late`` is tested on them in that order and LIMIT stops the scan.
        # First over the LATE_HEAD × n nearest rows only (a top-N sort, not a sort of every
        # row); only when fewer than n of those pass, over all of them — the same rows.
        names = "".join(f", {a}.{name}" for name in re.findall(r"\bAS\s+(\w+)\s*(?=,|$)", extra))

        def in_order(limit: str, gate: str = "") -> str:
            return (f"SELECT {a}.{id_col}, {a}.d{names} FROM (SELECT {a}.{id_col},"
                    f" {a}.embedding <=> %(q)s::vector AS d{extra}{late_cols} FROM {table} {a}"
                    f" WHERE {{gate}}{agent} AND {where} AND {a}.embedding IS NOT NULL"
                    f" ORDER BY ({a}.embedding <=> %(q)s::vector) + 0, {a}.{id_col}{limit} OFFSET 0) {a}"
                    f" WHERE {gate}{late} LIMIT %(n)s")

        exact = (f"WITH head AS MATERIALIZED ({in_order(f' LIMIT %(n)s * {LATE_HEAD}')})"
                 f" SELECT * FROM head WHERE (SELECT count(*) FROM head) >= %(n)s"
                 f" UNION ALL ({in_order('', '(SELECT count(*) FROM head) < %(n)s AND ')})")
    if small is True:
        return f"nn AS MATERIALIZED ({exact.format(gate='')})"
    return (
        f"cnt AS MATERIALIZED (SELECT count(*) <= {int(exact_rows)} AS small FROM"
        f" (SELECT 1 FROM {table} WHERE agent_id = %(a)s LIMIT {int(exact_rows) + 1}) c),"
        f" nn AS MATERIALIZED (({exact.format(gate='(SELECT small FROM cnt) AND ')}) UNION ALL ({hnsw.format(gate='NOT (SELECT small FROM cnt) AND ')}))"
    )
