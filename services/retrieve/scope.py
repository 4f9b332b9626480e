"""A retrieve narrowed to a session (or several) and/or a metadata filter (issue 24, ADR-0047).

``RetrieveFilter`` is the value callers pass (``Memory.retrieve(..., within=...)``, the HTTP
body's ``within``, Mem0's ``search(filters=...)``); ``narrowing`` compiles it once per call
into the ``signals.shared.Narrowing`` predicate every candidate statement ANDs into its
WHERE clause. A turn passes when its ``session_id`` is one of the sessions AND its metadata
satisfies the filter (``services/management/metadata_filter.py``, the same grammar
``list_facts`` takes); a fact passes when one of its source turns passes.

Why compiled once, and why a probe: the predicate's SQL and parameters are the same for every
statement of the call, and whether it is *selective* (few turns pass) decides how nearest-row
searches run — an HNSW walk filtered down to 1 % of the rows visits ~100 rows per row it keeps
(and pgvector's iterative scan gives up after ``max_scan_tuples``), while the exact distance
over the few passing rows is a short sort. Two capped counts in one statement per call
decide it (``probe``: few passing turns, and a small share of the agent's).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engramdb.projections.scope_keys import scope_keys_of
from engramdb.services.management.metadata_filter import MAX_BRANCHES, MetadataFilter
from engramdb.services.retrieve.signals.shared import (
    TURN_ALIAS,
    Narrowing,
    copy_param_names,
    custom_plans,
)

MAX_SESSIONS = 1000
# the narrowing is selective (exact nearest rows over the passing turns' facts) when at most
# this many turns pass AND they are at most this share of the agent's turns (``probe``)
SELECTIVE_TURNS = 1500
SELECTIVE_SHARE = 0.15
# the cap for a ``copied`` narrowing (its facts found by their own scope's GIN index, no list
# of ids to read and ship): the exact read of ~2 facts a turn stays cheaper than an HNSW walk
# that keeps 1 row in 15–25 up to about this many turns at 100k facts (4 % of the turns:
# ×1.5 vs ×2.3 an unfiltered call; 6 %: ×1.5 vs ×1.8; 10 %: even, ADR-0047)
SELECTIVE_COPIED_TURNS = 4000
# the cap for a ``keyed`` one (its facts found by the exact index of their keys, no row
# re-tested): its exact read costs a third of a containment's (ten sessions, 10,000 facts:
# 5.5 vs 17.8 ms), below the HNSW walk's 12.5 ms; up to the turns' own exact cap, as a
# selective verdict searches the turns exactly too
SELECTIVE_KEYED_TURNS = 6000
# a narrowing too broad for its facts still searches its passing TURNS exactly up to this many
# of them, at most ``SELECTIVE_SHARE`` of the agent's (``Narrowing.few_turns``): a turn search
# reads the turns alone, found by their session / metadata index. 100k facts, 50k turns, one
# turn-search statement: 5,000 turns (10 sessions) 7.6 ms exact vs 12.5 walked, 6,000 9.0
# vs 10.9, 7,500 10.8 vs 9.0, 10,000 10.5 vs 6.9 (ADR-0047)
EXACT_TURNS = 6000
# a selective narrowing lists its passing turns for the neighbour walk (``Narrowing.listed_turns``)
# when they are fewer than this many per session they lie in: then they lie far apart and
# the walk by the list skips the others in the index (spread over 100 sessions, 10 a session:
# 6.4 -> 2.1 ms a call); denser, the plain walk reads little more than the turns it keeps
# and the list only costs its transfer and hash (clustered in 2 sessions: 0.8 -> 1.9 ms)
LISTED_WALK_PER_SESSION = 32


@dataclass(frozen=True)
class RetrieveFilter:
    """Which turns (and the facts drawn from them) a retrieve may use.

    ``session_ids``: the turn's session is one of them (empty: any session). ``metadata``: a
    filter tree over the turn's metadata (``{"channel": "slack"}``, ``{"AND": [...]}``, …).
    Both given: both must hold for the same turn."""

    session_ids: tuple[str, ...] = ()
    metadata: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, session_id: str | Sequence[str] | None = None,
           metadata: Mapping[str, Any] | None = None) -> RetrieveFilter | None:
        """The filter for these arguments, ``None`` when they narrow nothing; a bad value is
        a ``ValueError`` naming it (a 4xx at the edges)."""
        if session_id is None:
            sessions: tuple[str, ...] = ()
        elif isinstance(session_id, str):
            sessions = (session_id,)
        elif isinstance(session_id, Sequence) and all(isinstance(s, str) for s in session_id):
            sessions = tuple(dict.fromkeys(session_id))
            if not sessions:
                raise ValueError("session_id: an empty list narrows to nothing; omit it instead")
        else:
            raise ValueError("session_id must be a string or a list of strings")
        if len(sessions) > MAX_SESSIONS:
            raise ValueError(f"session_id: at most {MAX_SESSIONS} sessions")
        if any(not s or "\x00" in s for s in sessions):
            raise ValueError("session_id: sessions are non-empty strings")
        if metadata is not None:
            if not isinstance(metadata, Mapping):
                raise ValueError("metadata: a filter is a JSON object")
            MetadataFilter(dict(metadata))  # validates: a misspelt operator is a 4xx here
        if not sessions and not metadata:
            return None
        return cls(sessions, dict(metadata) if metadata else None)

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape the HTTP / NATS / MCP bodies take (``within``)."""
        out: dict[str, Any] = {}
        if self.session_ids:
            out["session_id"] = list(self.session_ids)
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        return out

    @classmethod
    def from_dict(cls, body: Mapping[str, Any] | None) -> RetrieveFilter | None:
        if body is None:
            return None
        if not isinstance(body, Mapping):
            raise ValueError("within: an object with session_id and/or metadata")
        unknown = sorted(set(body) - {"session_id", "metadata"})
        if unknown:
            raise ValueError(f"within: unknown key(s) {', '.join(unknown)} (use session_id, metadata)")
        return cls.of(body.get("session_id"), body.get("metadata"))


def narrowing(flt: RetrieveFilter | None, fact_copy: bool = True) -> Narrowing | None:
    """The compiled predicate (``None`` without a filter: the statements stay as they were).

    ``fact_copy``: when the filter is a few containments of a turn's scope
    (``scope_containments``), facts are tested on their own copy of their source turns' scope
    (``nwc``, ``nwc_1``, …: ``mem_facts.source_scope``) instead of through their source
    turns — the same facts pass."""
    if flt is None:
        return None
    params: dict[str, Any] = {}
    parts: list[str] = []
    if flt.session_ids:
        params["nws"] = list(flt.session_ids)
        parts.append(f"{TURN_ALIAS}.session_id = ANY(%(nws)s::text[])")
    if flt.metadata:
        parts.append(MetadataFilter(dict(flt.metadata)).sql(f"{TURN_ALIAS}.metadata", params))
    elements = (scope_containments(flt) if fact_copy else None) or []
    for name, element in zip(copy_param_names(len(elements)), elements, strict=True):
        params[name] = json.dumps([element])
    keys = scope_keys_of(elements) if elements else None
    if keys is not None:
        params["nwk"] = keys  # the same elements as exact keys (``Narrowing.keyed``)
    return Narrowing("(" + " AND ".join(parts) + ")", params)


def scope_containments(flt: RetrieveFilter) -> list[dict[str, Any]] | None:
    """The filter as the elements a fact's ``source_scope`` must contain ONE of (``{"s":
    session, "m": {key: value, ...}}`` each), or ``None`` when it is not such an OR.

    Why it is exact: a turn passes ``{"k": v}`` when ``metadata @> {"k": v}``
    (``MetadataFilter``'s equality), so a conjunction of equalities on distinct keys is
    ``metadata @> {k1: v1, k2: v2}``, an ``in`` or ``OR`` of such is one containment per branch
    (``MetadataFilter.branches``), and a turn in one of the sessions is one more choice per
    session. With the session, ``{"s": S, "m": {...}}`` is contained in the element of a turn
    exactly when that turn passes. An array contains such an element when ONE of its
    elements does: one source turn passes, the rule for facts — so a fact passes when its
    copy contains one of the branches. ``NOT``, ``ne``, ``nin``, ``contains``, a key equated
    to two values, or more than ``MAX_BRANCHES`` branches keep the source-turn test."""
    sessions: list[dict[str, Any]] = [{"s": s} for s in flt.session_ids] or [{}]
    metadata: list[dict[str, Any]] = [{}]
    if flt.metadata:
        found = MetadataFilter(dict(flt.metadata)).branches()
        if found is None:
            return None
        metadata = [{"m": branch} for branch in found]
    elements = [{**s, **m} for s in sessions for m in metadata]
    if len(elements) > MAX_BRANCHES or elements == [{}]:
        return None
    return elements


# Whether the facts' exact keys are indexed (``projections/scope_keys.py``): a database whose
# schema setup has not run since they were declared — a retrieve-only process upgraded before
# the projector that adds them — has no index, and a keyed narrowing then takes the
# containments (its expression without the index would be computed on every row)
_HAS_SCOPE_KEYS = "to_regclass('mem_facts_scope_keys') IS NOT NULL"


def selective_cap(scope: Narrowing) -> int:
    """How many passing turns a selective ``scope`` may have (``probe_counted``)."""
    if scope.keyed:
        return SELECTIVE_KEYED_TURNS
    return SELECTIVE_COPIED_TURNS if scope.copied else SELECTIVE_TURNS


def few_turns_cap(scope: Narrowing) -> int:
    """How many passing turns ``scope`` may have and still search them exactly
    (``Narrowing.few_turns``): the probe counts them up to this many."""
    return max(EXACT_TURNS, selective_cap(scope))


def probe(conn: Any, agent_id: str, scope: Narrowing | None, cap: int | None = None,
          share: float | None = None, turns_cap: int | None = None) -> Narrowing | None:
    """``scope`` marked selective or broad, with few turns or not (``probe_counted``)."""
    return None if scope is None else probe_counted(conn, agent_id, scope, cap, share, turns_cap=turns_cap)[0]


def probe_counted(conn: Any, agent_id: str, scope: Narrowing, cap: int | None = None,
                  share: float | None = None, turns_known: int = 0,
                  turns_cap: int | None = None) -> tuple[Narrowing, int, int]:
    """``scope`` marked selective when at most ``cap`` (``SELECTIVE_TURNS``) of the agent's
    turns pass AND they are at most ``share`` (``SELECTIVE_SHARE``) of its turns.

    One statement: two capped counts — the passing turns (the session index and the metadata
    GIN index find them), then, only when those are few, the agent's turns up to
    ``passing / share`` (an index-only count of at most ``cap / share`` rows) — and, when
    selective, the ids of the facts drawn from a passing turn (one ``mem_facts_sources``
    GIN lookup per passing turn), bound as ``nwf`` into every statement of the call: a
    hashed / primary-key ``fact_id = ANY`` test there instead of an overlap with all the
    passing turns' ids per statement (a GIN scan with ~1000 keys cost ~28 ms each, several
    times per call at 100k facts); and the passing turns' ids (``nwt``), which the probe reads
    anyway, for the one statement that walks turns by another index (``Narrowing.listed_turns``). Why the share: a filtered HNSW walk visits ~ 1 / share
    rows per row it keeps — cheap once a sixth or more of the rows pass, while the exact
    search over the passing rows grows with them (``{"channel": "slack"}``, half of 10k
    facts: 13 ms vs 140 ms, ADR-0047). The ids are read once per call: a fact projected
    between this and a later statement of the same call is left out (as if it came later).
    Also returned: how many turns pass, counted up to ``cap + 1``, and how many of the
    agent's turns were counted (a lower bound of them; ``turns_known``, a lower bound known
    already, spares that count when it is enough to decide). A ``copied`` narrowing lists no
    facts: they are tested on their own ``source_scope`` (``Narrowing.fact``), which spares
    the listing (~5 ms of the probe's ~8 at 100k facts, a 2 % filter, ADR-0047).

    Not selective, it may still have ``few_turns``: at most ``turns_cap`` (``EXACT_TURNS``)
    passing turns under the same share, so the turn searches take their exact branch
    (``exact_turns_when_few``) while the facts are walked. The passing turns are counted up to
    the larger of the two caps."""
    cap = selective_cap(scope) if cap is None else int(cap)
    turns_cap = max(few_turns_cap(scope) if turns_cap is None else int(turns_cap), cap)
    share = max(SELECTIVE_SHARE if share is None else float(share), 1e-9)
    # p: the passing turns (at most cap + 1); n: the agent's turns, counted up to
    # floor(p / share) + 1 (more than that: the passing ones are under ``share`` of them);
    # ids: when selective, the facts drawn from a passing turn, one GIN lookup per turn, and
    # the passing turns themselves and their sessions (``nwt``, ``Narrowing.listed_turns``)
    # facts that carry their source turns' scope (``nwc``) are tested on it: no listing
    listing = ("NULL::text[]" if scope.copied else
               "CASE WHEN v.selective THEN (SELECT coalesce(array_agg(DISTINCT x.fact_id), '{}')"
               " FROM p CROSS JOIN LATERAL (SELECT f.fact_id FROM mem_facts f WHERE"
               " f.source_message_ids @> ARRAY[p.message_id] AND f.agent_id = %(a)s) x) END")
    # the passing turns' ids for the neighbour walk (``Narrowing.listed_turns``) when the facts
    # are listed too: the verdict is then the call's; a copied one's is kept across calls
    # (``BroadVerdicts``) and the walk's statement reads them itself
    turn_listing = "NULL::text[]" if scope.copied else "(SELECT coalesce(array_agg(p.message_id), '{}') FROM p)"
    with custom_plans(conn):  # a generic plan (psycopg prepares after 5 runs) knows no sizes
        cur = conn.execute(
            f"WITH p AS MATERIALIZED (SELECT m.message_id, m.session_id FROM mem_messages m"
            f" WHERE m.agent_id = %(a)s AND {scope.turn('m')} LIMIT {turns_cap + 1}),"
            f" c AS MATERIALIZED (SELECT count(*) AS p FROM p),"
            f" n AS MATERIALIZED (SELECT count(*) AS n FROM (SELECT 1 FROM mem_messages m WHERE m.agent_id = %(a)s"
            f" LIMIT (SELECT CASE WHEN c.p BETWEEN 1 AND {turns_cap} AND floor(c.p / %(nw_share)s) >= %(nw_known)s"
            f" THEN floor(c.p / %(nw_share)s)::bigint + 1 ELSE 0 END FROM c)) t),"
            f" r AS MATERIALIZED (SELECT c.p = 0 OR greatest(n.n, %(nw_known)s) > c.p / %(nw_share)s AS under FROM c, n),"
            f" v AS MATERIALIZED (SELECT c.p <= {cap} AND r.under AS selective,"
            f" c.p <= {turns_cap} AND r.under AS few FROM c, r)"
            f" SELECT v.selective, (SELECT c.p FROM c), (SELECT n.n FROM n), {listing},"
            f" CASE WHEN v.selective THEN {turn_listing} END,"
            f" CASE WHEN v.selective THEN (SELECT count(DISTINCT p.session_id) FROM p) END, v.few,"
            f" {_HAS_SCOPE_KEYS if scope.keyed else 'true'} FROM v",
            {"a": agent_id, "nw_share": share, "nw_known": int(turns_known), **scope.params},
            )
    row = cur.fetchone()
    if row is None:
        return Narrowing(scope.turn_sql, scope.params, False), 0, 0
    if not row[7]:  # keyed, but the facts' keys are not indexed yet: their containments
        scope = scope.without_keys()
        row = (row[0] and int(row[1]) <= selective_cap(scope), *row[1:])
    if not row[0]:
        return Narrowing(scope.turn_sql, scope.params, False, bool(row[6])), int(row[1]), int(row[2])
    listed: dict[str, Any] = dict(scope.params) if scope.copied else {**scope.params, "nwf": list(row[3] or [])}
    passing, sessions = int(row[1]), max(int(row[5] or 0), 1)
    sparse = passing < LISTED_WALK_PER_SESSION * sessions  # sparse in the sessions it touches
    if sparse and not scope.copied:
        listed["nwt"] = list(row[4] or [])
    return Narrowing(scope.turn_sql, listed, True, sparse_turns=sparse), passing, int(row[2])


class BroadVerdicts:
    """``probe`` that remembers which narrowings of an agent are broad (and whether their
    passing turns are few, ``Narrowing.few_turns``), and which copied ones are selective.

    Why it may: the broad form (a per-row probe of the source turns) returns the right rows
    for ANY narrowing — the verdict only chooses the faster plan — and a narrowing that more
    than ``cap`` turns pass stays that way, turns being append-only (an erased memory starts
    over, and a kept verdict then only costs it speed for ``ttl``). A broad verdict by share
    (few passing turns, but a large share of a small agent's) can flip as the agent grows:
    it is kept ``share_ttl``, and so is one with few passing turns (they may grow past
    ``EXACT_TURNS``; until then only the plan of the turn searches is older than the data).
    A selective verdict that carries listed fact ids (and turn ids), which must be read for
    the call, is never kept; a ``copied`` one lists nothing (its facts are tested on their
    scope copy, its neighbour walk reads its passing turns itself) and is kept ``share_ttl``:
    more turns may pass by then, and until then only the plans are older than the data.
    Saves the probe statement (~1.5 ms at 100k facts, ``{"channel": "slack"}``; ~6 ms for an
    ``OR`` of two 2 % values) on every call but the first. Also kept: a lower bound of each
    agent's turns (append-only too), so a selective probe counts them only when the bound
    cannot decide the share (~1 ms of a 2 % filter's probe at 100k)."""

    def __init__(self, ttl: float = 3600.0, share_ttl: float = 60.0, max_kept: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl, self.share_ttl, self.max_kept, self.clock = ttl, share_ttl, max_kept, clock
        self._kept: dict[tuple[str, str], tuple[float, Narrowing]] = {}  # -> (until, verdict)
        self._turns: dict[str, tuple[float, int]] = {}  # agent -> (until, turns at least)
        self._lock = threading.Lock()

    def probe(self, conn: Any, agent_id: str, scope: Narrowing | None) -> Narrowing | None:
        if scope is None or scope.selective:
            return scope
        key = (agent_id, scope.turn_sql + "\x00" + json.dumps(scope.params, sort_keys=True, default=str))
        now = self.clock()
        with self._lock:
            kept = self._kept.get(key)
            turns = self._turns.get(agent_id)
        if kept is not None and kept[0] > now:
            return kept[1]
        known = turns[1] if turns is not None and turns[0] > now else 0
        decided, passing, counted = probe_counted(conn, agent_id, scope, turns_known=known)
        with self._lock:
            if len(self._kept) >= self.max_kept or len(self._turns) >= self.max_kept:
                self._kept.clear()  # many agents / filters: start over
                self._turns.clear()
            if counted > known:
                self._turns[agent_id] = (now + self.ttl, counted)
            if not decided.selective:
                until = now + (self.ttl if passing > few_turns_cap(scope) else self.share_ttl)
                self._kept[key] = (until, decided)
            elif scope.copied:
                assert "nwf" not in decided.params and "nwt" not in decided.params, "a kept verdict lists nothing"
                self._kept[key] = (now + self.share_ttl, decided)
        return decided
