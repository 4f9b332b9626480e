"""What every signal's SQL shares: the visibility predicates (now / as of), LIKE
escaping, the similarity threshold, the HNSW and plan-cache settings, one
round-trip batching and the nearest-neighbour CTE. User text only ever reaches SQL as a bound
parameter; LIKE patterns are escaped."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import Any

# re-exported for the signals: its home is infra.pgsql, so management needs no retrieve import
from engramdb.infra.pgsql import escape_like as escape_like
from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.signals.narrowing import TURN_ALIAS as TURN_ALIAS
from engramdb.services.retrieve.signals.narrowing import Narrowing as Narrowing
from engramdb.services.retrieve.signals.narrowing import copy_param_names as copy_param_names
from engramdb.services.retrieve.signals.narrowing import late_probe as late_probe

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
