"""Ranked lists for the *tail* of the fused ranking, built from its head (ADR-0037):
``fact_feedback`` / ``message_feedback`` (dense pseudo-relevance feedback) and
``message_neighbour`` (the turns said next to the head's turns).

Why: on LoCoMo multi-hop questions the evidence is mostly among the candidates but ranked
21–40, and for some questions a gold turn is in no candidate list at all (no fact cites it,
and neither its words nor its embedding are near the question's). Both lists start from what
the first fusion already ranks best — the units that decide R@10 — and look for more of the
same: the fused top's vectors pull the question towards the conversation's own wording
(Rocchio on vectors, no extra embedding), and a turn next to a found turn often continues
the same exchange ("we went camping" → "the kids loved the marshmallows"). Both count only
below ``person_lists_from`` (the head stays exactly the fusion of the other lists), and
fusion decides what of them earns a place in the tail.

Pure parts (which units anchor the lists, how neighbours are ordered) are functions here;
``feedback`` and ``neighbours`` are the only I/O, on the request's connection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

from engramdb.services.retrieve.fusion import EVENT, FACT
from engramdb.services.retrieve.rank import Candidate, EventCandidate
from engramdb.services.retrieve.signals.messages import turn_row
from engramdb.services.retrieve.signals.shared import (
    Narrowing,
    custom_plans,
    index_order_only,
    message_visibility,
    narrowing_params,
)
from engramdb.services.retrieve.subject_sweep import Subject, sweep

FEEDBACK_LISTS = ("fact_feedback", "message_feedback")
NEIGHBOUR_LISTS = ("message_neighbour",)
TAIL_LISTS = FEEDBACK_LISTS + NEIGHBOUR_LISTS


def enabled(weights: Mapping[str, float], names: Sequence[str] = TAIL_LISTS) -> bool:
    return any(float(weights.get(name, 0.0)) > 0.0 for name in names)


def top_units(
    facts: Sequence[Candidate], events: Sequence[EventCandidate], n: int
) -> list[tuple[str, str]]:
    """The first ``n`` units of the fused ranking as (kind, id): facts and turns merged by
    their fused score (facts first on ties, as the ranking's own order puts them)."""
    tagged = [(-round(c.final, 9), 0, i, (FACT, c.fact_id)) for i, c in enumerate(facts)]
    tagged += [(-round(e.final, 9), 1, i, (EVENT, e.message_id)) for i, e in enumerate(events)]
    tagged.sort(key=lambda t: t[:3])
    return [t[3] for t in tagged[: max(0, n)]]


def anchor_turns(units: Sequence[tuple[str, str]], sources: Mapping[str, Sequence[str]]) -> list[str]:
    """The turns the units stand for, in rank order: a turn itself, a fact its source turns."""
    out: list[str] = []
    for kind, unit_id in units:
        for mid in (sources.get(unit_id, ()) if kind == FACT else (unit_id,)):
            if mid not in out:
                out.append(mid)
    return out


def order_neighbours(
    anchors: Sequence[str], pairs: Sequence[tuple[str, str, int]], by: str = "anchor"
) -> list[str]:
    """``pairs`` = (anchor, neighbour, offset in the session: −2, −1, 1, 2 …). ``by="anchor"``:
    the neighbours of the best anchor first, nearest first (the turn before on a tie: the
    question it answers), then the next anchor's; ``by="distance"``: every anchor's turn
    before and after, best anchor first, then every anchor's second turn, …. An anchor itself
    is never its own or another's neighbour here (it is already ranked)."""
    rank = {mid: i for i, mid in enumerate(anchors)}
    anchor_set = set(anchors)

    def key(p: tuple[str, str, int]) -> tuple[int, int, bool, str]:
        if by == "distance":
            return abs(p[2]), rank[p[0]], p[2] > 0, p[1]
        return rank[p[0]], abs(p[2]), p[2] > 0, p[1]

    ordered = sorted((p for p in pairs if p[0] in rank and p[1] not in anchor_set and p[2] != 0), key=key)
    out: list[str] = []
    seen: set[str] = set()
    for _, mid, _ in ordered:
        if mid not in seen:
            seen.add(mid)
            out.append(mid)
    return out


@dataclass
class TailOut:
    fact_ids: list[str] = field(default_factory=list)  # fact_feedback
    message_ids: list[str] = field(default_factory=list)  # message_feedback
    neighbour_ids: list[str] = field(default_factory=list)  # message_neighbour


_FEEDBACK_VECTOR = """
    WITH top AS (
        SELECT l2_normalize(f.embedding) AS v FROM mem_facts f
         WHERE f.agent_id = %(a)s AND f.fact_id = ANY(%(facts)s) AND f.embedding IS NOT NULL
        UNION ALL
        SELECT l2_normalize(m.embedding) FROM mem_messages m
         WHERE m.agent_id = %(a)s AND m.message_id = ANY(%(msgs)s) AND m.embedding IS NOT NULL
    )
    SELECT (l2_normalize(%(q)s::vector)
            + array_fill(%(beta)s::real, ARRAY[vector_dims(%(q)s::vector)])::vector * avg(v))::text
      FROM top HAVING count(*) > 0
"""


def feedback_vector(conn: Any, agent_id: str, qvec: str, units: Sequence[tuple[str, str]], beta: float) -> str | None:
    """Rocchio on vectors, in SQL (vectors never travel to Python but this one, as text):
    the question's unit vector plus ``beta`` × the mean unit vector of ``units``. ``None``
    when no unit has a vector."""
    row = conn.execute(
        _FEEDBACK_VECTOR,
        {"a": agent_id, "q": qvec, "beta": float(beta),
         "facts": [i for k, i in units if k == FACT], "msgs": [i for k, i in units if k == EVENT]},
    ).fetchone()
    return None if row is None else str(row[0])


def feedback(
    conn: Any,
    agent_id: str,
    qvec: str,
    units: Sequence[tuple[str, str]],
    *,
    beta: float,
    as_of: Any,
    min_confidence: float,
    limit: int,
    ef_search: int,
    exact_rows: int = 0,
    scope: Narrowing | None = None,
) -> TailOut:
    """Every fact and turn nearest to the feedback vector (no similarity threshold: the list
    ranks, fusion decides), the subject sweep's statements over every row."""
    if not units:
        return TailOut()
    vec = feedback_vector(conn, agent_id, qvec, units, beta)
    if vec is None:
        return TailOut()
    out = sweep(conn, agent_id, Subject((), (), ""), vec, as_of=as_of, min_confidence=min_confidence,
                limit=limit, ef_search=ef_search, exact_rows=exact_rows, only_subject=False, scope=scope)
    return TailOut(fact_ids=out.fact_ids, message_ids=out.message_ids)


def neighbour_pairs(
    conn: Any, agent_id: str, anchors: Sequence[str], span: int, as_of: Any,
    speakers: Sequence[str] = (),
) -> list[tuple[str, str, int, bool]]:
    """(anchor, neighbour, offset, said by one of ``speakers``) for the turns around each
    anchor (``neighbours``)."""
    return neighbours(conn, agent_id, anchors, span, as_of, None, speakers).pairs


@dataclass
class Neighbours:
    """The (anchor, neighbour, offset, named) pairs and each neighbour's turn row (``turn_row``)."""

    pairs: list[tuple[str, str, int, bool]] = field(default_factory=list)
    rows: dict[str, tuple[Any, ...]] = field(default_factory=dict)


def neighbours(
    conn: Any, agent_id: str, anchors: Sequence[str], span: int, as_of: Any, qvec: str | None = None,
    speakers: Sequence[str] = (),
    scope: Narrowing | None = None,
) -> Neighbours:
    """(anchor, neighbour, offset, said by one of ``speakers``) for the ``span`` visible turns
    said just before (offset −1, −2, …) and just after (1, 2, …) each anchor in the anchor's
    session, turns ordered as said (``occurred_at``, then as recorded, then by id), with each
    neighbour's row (cosine to ``qvec``). Each side is a short walk of the ``(agent_id,
    occurred_at)`` index from the anchor's time (a LATERAL ``LIMIT``), so the cost follows the
    anchors, not the agent's size. With ``speakers`` (folded names, ADR-0040) each side walks
    ``2 × span`` turns, so that ``span`` of the named people's own turns are in reach past the
    other side's replies (``by_speaker``). The rows come in the same statement (ADR-0041): a
    second round trip for them sat on the call's serial path."""
    if not anchors or span <= 0:
        return Neighbours()
    row = turn_row("n")
    if scope is not None and scope.lists_turns_late:
        # the passing turns of the anchors' sessions, read once by their indexes (a bitmap of
        # the sessions ANDed with the filter's), numbered, each neighbour found by its number
        with custom_plans(conn):
            found = conn.execute(
                _PASSING_NEIGHBOURS.format(visible=message_visibility(as_of, "i", scope), row=row),
                _neighbour_params(agent_id, anchors, span, as_of, qvec, speakers, scope)).fetchall()
    else:
        listed = scope.listed_turns() if scope is not None else None
        if listed is not None:
            side, visible = _LISTED_SIDE, message_visibility(as_of, "i", listed)
        else:
            side, visible = _SIDE, message_visibility(as_of, "n", scope)
        # narrowed: the walk in the index's order, never a bitmap of the filter + a sort (see
        # ``index_order_only``); unnarrowed, the statement and its plans are as before
        with index_order_only(conn) if scope is not None else nullcontext():
            found = _neighbour_rows(conn, side, visible, row, agent_id, anchors, span, as_of, qvec, speakers, scope)
    out = Neighbours()
    for anchor, offset, *turn, named, _ in found:
        out.pairs.append((str(anchor), str(turn[0]), int(offset), bool(named)))
        out.rows[str(turn[0])] = tuple(turn)
    return out


# one side of an anchor's walk: the ``walk`` visible turns next to it in its session, in order
_SIDE = """
        SELECT a.message_id AS anchor, {sign} * x.k AS k, x.*
          FROM a, LATERAL (
            SELECT {row}, coalesce(lower(n.speaker) = ANY(%(speakers)s::text[]), false) AS named,
                   row_number() OVER (ORDER BY n.occurred_at {o}, n.recorded_at {o}, n.message_id {o}) AS k
              FROM mem_messages n
             WHERE n.agent_id = %(a)s AND n.session_id = a.session_id
               AND (n.occurred_at, n.recorded_at, n.message_id) {cmp} (a.occurred_at, a.recorded_at, a.message_id)
               AND {visible}
             ORDER BY n.occurred_at {o}, n.recorded_at {o}, n.message_id {o}
             LIMIT %(walk)s) x"""

# ``_SIDE`` under a narrowing whose passing turns are listed (``Narrowing.listed_turns``): the
# walk ``i`` reads only columns of the session-order index (its key, the visibility's and
# the listed ids' test), so it is an index-only scan that passes over the turns left out
# without reading their rows; the ``walk`` turns it keeps are then read by primary key.
# Same rows and order as ``_SIDE`` with the turn predicate: the list is the passing turns.
_LISTED_SIDE = """
        SELECT a.message_id AS anchor, {sign} * w.k AS k, {row},
               coalesce(lower(n.speaker) = ANY(%(speakers)s::text[]), false) AS named, w.k
          FROM a, LATERAL (
            SELECT kept.message_id,
                   row_number() OVER (ORDER BY kept.occurred_at {o}, kept.recorded_at {o}, kept.message_id {o}) AS k
              FROM (SELECT i.message_id, i.occurred_at, i.recorded_at FROM mem_messages i
                     WHERE i.agent_id = %(a)s AND i.session_id = a.session_id
                       AND (i.occurred_at, i.recorded_at, i.message_id) {cmp} (a.occurred_at, a.recorded_at, a.message_id)
                       AND {visible}
                     ORDER BY i.occurred_at {o}, i.recorded_at {o}, i.message_id {o}
                     LIMIT %(walk)s) kept) w
          JOIN mem_messages n ON n.agent_id = %(a)s AND n.message_id = w.message_id"""


# ``neighbours`` under a narrowing whose passing turns are not listed but lie sparse in their
# sessions (``Narrowing.lists_turns_late``), in one statement: ``p``, the passing turns of the
# anchors' sessions, read once — a bitmap of those sessions' turns (the session-order index)
# ANDed with the filter's (the metadata GIN index); ``c`` numbers them in each session, as
# said, with the anchors among them (an anchor right after its own turn when that passes,
# ``own``; ``upto`` counts the passing turns said up to it); an anchor's k-th passing turn
# before is then the one numbered ``upto - own - k + 1``, its k-th after ``upto + k`` —
# found by a hash join, so the cost is the passing turns of those sessions plus the pairs,
# not anchors × turns. Same pairs as ``_SIDE`` with the turn predicate (``occurred_at`` and
# ``recorded_at`` are never NULL, so the row comparison and the ORDER BY agree). Why:
# listing every passing turn of the agent first, then walking the session-order index past
# the turns left out, read the rows of a rare filter spread over every session (an OR of
# two 2 % values at 100k facts: 9.2 → 6.1–6.5 ms for the same pairs, ADR-0047).
_PASSING_NEIGHBOURS = """
    WITH a AS MATERIALIZED (SELECT m.message_id, m.session_id, m.occurred_at, m.recorded_at FROM mem_messages m
         WHERE m.agent_id = %(a)s AND m.message_id = ANY(%(ids)s) AND m.session_id IS NOT NULL),
     p AS MATERIALIZED (SELECT i.message_id, i.session_id, i.occurred_at, i.recorded_at FROM mem_messages i
         WHERE i.agent_id = %(a)s AND i.session_id = ANY((SELECT array_agg(DISTINCT a.session_id) FROM a)::text[])
           AND {visible}),
     c AS MATERIALIZED (SELECT u.message_id, u.session_id, u.anchor,
                 count(*) FILTER (WHERE NOT u.anchor) OVER w AS upto,
                 coalesce(lag(u.message_id) OVER w = u.message_id, false) AS own
            FROM (SELECT p.*, false AS anchor FROM p UNION ALL SELECT a.*, true FROM a) u
          WINDOW w AS (PARTITION BY u.session_id ORDER BY u.occurred_at, u.recorded_at, u.message_id, u.anchor
                       ROWS UNBOUNDED PRECEDING)),
     x AS (SELECT c.message_id AS anchor, c.session_id, c.upto, c.upto - c.own::int AS before
             FROM c WHERE c.anchor),
     want AS (SELECT x.anchor, x.session_id, -k AS k, x.before - k + 1 AS r
                FROM x, generate_series(1, %(walk)s) k WHERE x.before - k + 1 >= 1
              UNION ALL
              SELECT x.anchor, x.session_id, k, x.upto + k FROM x, generate_series(1, %(walk)s) k)
    SELECT want.anchor, want.k, {row}, coalesce(lower(n.speaker) = ANY(%(speakers)s::text[]), false) AS named,
           abs(want.k)
      FROM want
      JOIN c ON NOT c.anchor AND c.session_id = want.session_id AND c.upto = want.r
      JOIN mem_messages n ON n.agent_id = %(a)s AND n.message_id = c.message_id"""


def _neighbour_rows(conn: Any, side: str, visible: str, row: str, agent_id: str, anchors: Sequence[str],
                    span: int, as_of: Any, qvec: str | None, speakers: Sequence[str],
                    scope: Narrowing | None) -> list[tuple[Any, ...]]:
    return conn.execute(
        "WITH a AS MATERIALIZED (SELECT m.message_id, m.session_id, m.occurred_at, m.recorded_at FROM mem_messages m"
        " WHERE m.agent_id = %(a)s AND m.message_id = ANY(%(ids)s) AND m.session_id IS NOT NULL)"
        + side.format(sign="-1", o="DESC", cmp="<", visible=visible, row=row)
        + " UNION ALL"
        + side.format(sign="1", o="ASC", cmp=">", visible=visible, row=row),
        _neighbour_params(agent_id, anchors, span, as_of, qvec, speakers, scope),
    ).fetchall()


def _neighbour_params(agent_id: str, anchors: Sequence[str], span: int, as_of: Any, qvec: str | None,
                      speakers: Sequence[str], scope: Narrowing | None) -> dict[str, Any]:
    return {"a": agent_id, "ids": list(anchors), "walk": int(span) * (2 if speakers else 1), "t": as_of,
            "q": qvec, "speakers": [str(s) for s in speakers], **narrowing_params(scope)}


def by_speaker(
    pairs: Sequence[tuple[str, str, int, bool]], span: int, how: str = "all"
) -> tuple[list[tuple[str, str, int]], list[tuple[str, str, int]]]:
    """Split ``neighbour_pairs``' rows into (first, then) lists of (anchor, neighbour, offset)
    for ``order_neighbours``. ``how="all"``: every turn at most ``span`` places away, first.
    ``"named"`` / ``"named-first"`` (ADR-0040): the named people's own turns first — up to
    ``span`` of theirs a side, the offset counted in their turns — and, for ``"named-first"``,
    then the other turns at most ``span`` places away; ``"named"`` keeps those only when no
    named turn was found (the named person is not a speaker here)."""
    near = [(a, n, d) for a, n, d, _ in pairs if abs(d) <= span]
    if how == "all":
        return near, []
    named: list[tuple[str, str, int]] = []
    counts: dict[tuple[str, bool], int] = {}
    for a, n, d, is_named in sorted(pairs, key=lambda p: (p[0], p[2] > 0, abs(p[2]))):
        if not is_named:
            continue
        key = (a, d > 0)
        counts[key] = counts.get(key, 0) + 1
        if counts[key] <= span:
            named.append((a, n, counts[key] if d > 0 else -counts[key]))
    if how == "named":
        return (named, []) if named else (near, [])
    return named, [p for p in near if p[1] not in {n for _, n, _ in named}]


__all__ = [
    "FEEDBACK_LISTS",
    "NEIGHBOUR_LISTS",
    "TAIL_LISTS",
    "TailOut",
    "anchor_turns",
    "by_speaker",
    "enabled",
    "feedback",
    "feedback_vector",
    "Neighbours",
    "neighbour_pairs",
    "neighbours",
    "order_neighbours",
    "top_units",
]
