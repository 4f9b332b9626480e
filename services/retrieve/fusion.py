"""Reciprocal-rank fusion of facts and conversation turns into one ranking (ADR-0009).

Why rank fusion and not a weighted sum of scores: the signals speak different units — a
cosine, a BM25 score, a graph strength — whose scales move with the embedding model, the
agent's vocabulary and the size of its memory, so hand-set weights fitted on one set of
conversations did not transfer to others (issue 9). Ranks are comparable across signals and
agents; RRF (``Σ w / (k + rank)``) needs one constant ``k`` and per-list weights, chosen by
leave-one-conversation-out cross-validation.

Why facts and turns in ONE ranking: a memory that stores the raw conversation must never
retrieve worse than a search over it, and a distilled fact and the turn it came from are two
views of the same evidence. Each list ranks either facts or turns; a turn already covered by
a fact ranked above it (its source) is skipped, and a fact whose every source turn is already
shown is skipped, so neither wastes a slot of the top k.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from engramdb.services.retrieve.diversity import diversify
from engramdb.services.retrieve.rank import Candidate, EventCandidate
from engramdb.services.retrieve.timeexpr import Window, in_windows

FACT = "fact"
EVENT = "event"


@dataclass
class Fused:
    """One unit of the fused ranking: its RRF score and its rank in each list it was in."""

    kind: str  # FACT | EVENT
    unit_id: str
    score: float = 0.0
    ranks: dict[str, int] = field(default_factory=dict)  # list name -> 1-based rank


def reciprocal_rank_fusion(
    lists: Mapping[str, tuple[str, Sequence[str]]],
    weights: Mapping[str, float],
    k: float,
) -> list[Fused]:
    """``lists`` maps a list name to (kind, ids best first). Units are keyed by (kind, id);
    ties break by kind (facts first), then id, so the order is deterministic."""
    units: dict[tuple[str, str], Fused] = {}
    for name, (kind, ids) in lists.items():
        weight = float(weights.get(name, 0.0))
        if weight <= 0.0:
            continue
        seen: set[str] = set()
        for rank, unit_id in enumerate(ids, start=1):
            if unit_id in seen:
                continue
            seen.add(unit_id)
            unit = units.setdefault((kind, unit_id), Fused(kind, unit_id))
            unit.score += weight / (k + rank)
            unit.ranks[name] = rank
    return sorted(units.values(), key=lambda u: (-u.score, u.kind != FACT, u.unit_id))


def best_possible(weights: Mapping[str, float], names: Iterable[str], k: float) -> float:
    """The score of a unit ranked first in every list: divides scores into [0, 1]."""
    total = sum(max(0.0, float(weights.get(n, 0.0))) for n in names)
    return total / (k + 1) if total > 0 else 1.0


def without_repeats(
    fused: Sequence[Fused], fact_sources: Mapping[str, Sequence[str]]
) -> list[Fused]:
    """Drop a turn a higher-ranked fact already cites, and a fact whose sources are all shown
    above it (a fact with no known source is always kept)."""
    shown: set[str] = set()
    out: list[Fused] = []
    for unit in fused:
        covers = set(fact_sources.get(unit.unit_id, ())) if unit.kind == FACT else {unit.unit_id}
        if covers and covers <= shown:
            continue
        shown |= covers
        out.append(unit)
    return out


def _place(
    present: Mapping[str, tuple[str, Sequence[str]]],
    weights: Mapping[str, float],
    k: float,
    sources: Mapping[str, Sequence[str]],
    when_of: Callable[[Fused], datetime | None],
    time_windows: Sequence[Window],
    time_boost: float,
    diversity: tuple[float, int, int],
    memo: PlacementMemo | None = None,
) -> tuple[list[tuple[Fused, float]], float, int]:
    """Fusion, repeats out, time boost, diversity: (unit, raw value) best first, the scale
    that divides values into (0, 1], and the number of units fused. With the call's ``memo``,
    once per call for the same lists (ADR-0041: the head of the fusion after the tail lists is
    the fusion before them; both used to be computed)."""
    key = None if memo is None else _placement_key(present, weights, k)
    if memo is not None and key in memo:
        return memo[key]
    fused = reciprocal_rank_fusion(present, weights, k)
    kept = without_repeats(fused, sources)
    scale = best_possible(weights, [name for name, (_, ids) in present.items() if ids], k)
    raw = [u.score for u in kept]
    penalty, free, start = diversity
    boosted = time_boost > 0.0 and bool(time_windows)
    # the units' times only when a lever reads them: four placements per call, ~360 units each
    when = [when_of(u) for u in kept] if boosted or penalty > 0.0 else [None] * len(kept)
    if boosted:
        raw = [s * (1.0 + time_boost) if in_windows(time_windows, w) else s for s, w in zip(raw, when, strict=True)]
        scale *= 1.0 + time_boost
        order = sorted(range(len(kept)), key=lambda i: (-raw[i], i))
        kept, raw, when = [kept[i] for i in order], [raw[i] for i in order], [when[i] for i in order]
    days = [None if w is None else w.astimezone(UTC).date() for w in when] if penalty > 0.0 else when
    placed = diversify(kept, raw, days, penalty, free, start)
    if memo is not None and key is not None:
        memo[key] = (placed, scale, len(fused))
    return placed, scale, len(fused)


def _tail_only(
    head: Sequence[tuple[Fused, float]], everything: Sequence[tuple[Fused, float]],
    sources: Mapping[str, Sequence[str]], start: int,
) -> list[tuple[Fused, float]]:
    """The first ``start`` units of ``head`` (normalised scores), then ``everything``'s units
    not among them (nor repeating what is shown), scaled to stay below the head's last score."""
    top = list(head[:start])
    if not top:
        return list(everything)
    taken = {(u.kind, u.unit_id) for u, _ in top}
    shown: set[str] = set()
    for u, _ in top:
        shown |= set(sources.get(u.unit_id, ())) if u.kind == FACT else {u.unit_id}
    rest: list[tuple[Fused, float]] = []
    for unit, value in everything:
        if (unit.kind, unit.unit_id) in taken:
            continue
        covers = set(sources.get(unit.unit_id, ())) if unit.kind == FACT else {unit.unit_id}
        if covers and covers <= shown:
            continue
        shown |= covers
        rest.append((unit, value))
    if not rest:
        return top
    factor = top[-1][1] * TAIL_BELOW / max(rest[0][1], 1e-12)
    return top + [(u, v * factor) for u, v in rest]



#: placements of one call, keyed by the lists that decide them (``_placement_key``)
PlacementMemo = dict[tuple[Any, ...], tuple[list[tuple[Fused, float]], float, int]]


def _inputs(
    lists: Mapping[str, tuple[str, Sequence[str]]], facts: Sequence[Candidate], events: Sequence[EventCandidate]
) -> tuple[dict[str, tuple[str, list[str]]], dict[str, Sequence[str]], Callable[[Fused], datetime | None]]:
    """Each list restricted to the candidates, the facts' source turns, and a unit's time."""
    by_fact = {c.fact_id: c for c in facts}
    by_event = {e.message_id: e for e in events}
    present = {
        name: (kind, [i for i in ids if i in (by_fact if kind == FACT else by_event)])
        for name, (kind, ids) in lists.items()
    }
    sources: dict[str, Sequence[str]] = {c.fact_id: c.row.source_message_ids for c in facts}

    def when_of(u: Fused) -> datetime | None:
        return by_fact[u.unit_id].row.valid_from if u.kind == FACT else by_event[u.unit_id].occurred_at

    return present, sources, when_of


def _head_weights(
    present: Mapping[str, tuple[str, Sequence[str]]], weights: Mapping[str, float], tail_lists: Sequence[str]
) -> dict[str, float] | None:
    """The weights of the head's fusion (the tail lists at 0), or None when no tail list
    has a unit (the head is then the whole fusion)."""
    tail_on = [n for n in tail_lists if float(weights.get(n, 0.0)) > 0.0 and present.get(n, ("", []))[1]]
    if not tail_on:
        return None
    return {n: (0.0 if n in tail_on else w) for n, w in weights.items()}


def _placement_key(
    present: Mapping[str, tuple[str, Sequence[str]]], weights: Mapping[str, float], k: float
) -> tuple[Any, ...]:
    """What decides a placement within one call: the lists that count (weight > 0, not
    empty) with their units, and ``k``. A list with no unit or no weight adds nothing, so a
    fusion before the tail lists exist and the head of the fusion after them share a key.
    Sources, times, windows and diversity settings are the call's own and do not change."""
    return (k, tuple((name, float(weights.get(name, 0.0)), present[name][0], tuple(present[name][1]))
                     for name in sorted(present)
                     if float(weights.get(name, 0.0)) > 0.0 and present[name][1]))


def head_units(
    lists: Mapping[str, tuple[str, Sequence[str]]],
    weights: Mapping[str, float],
    k: float,
    facts: Sequence[Candidate],
    events: Sequence[EventCandidate],
    n: int,
    diversity_penalty: float = 0.0,
    time_windows: Sequence[Window] = (),
    time_boost: float = 0.0,
    diversity_free: int = 1,
    diversity_start: int = 0,
    tail_lists: Sequence[str] = (),
    tail_start: int = 0,
    memo: PlacementMemo | None = None,
) -> list[tuple[str, str]] | None:
    """The first ``n`` units (kind, id) that ``fuse_candidates`` with the same arguments
    would rank — in the order ``tail_lists.top_units`` reads them from its output (fused
    score rounded as the output carries it, facts first on a tie) — from the head's placement
    alone. Why: the tail lists only need the first fusion's top 10; placing every unit of
    it twice and writing scores onto the candidates cost a full fusion per call (ADR-0041).
    None when the top ``n`` would reach below the head (``n`` > ``tail_start`` or a head
    shorter than ``n``): the caller then fuses in full."""
    present, sources, when_of = _inputs(lists, facts, events)
    diversity = (diversity_penalty, diversity_free, diversity_start)
    head_weights = _head_weights(present, weights, tail_lists) if tail_start > 0 else None
    placed, scale, _ = _place(present, head_weights if head_weights is not None else weights, k, sources,
                               when_of, time_windows, time_boost, diversity, memo)
    limit = min(len(placed), tail_start) if head_weights is not None else len(placed)
    if n <= 0:
        return []
    if head_weights is not None and n > limit:
        return None
    rounded = [round(v / scale, 9) for _, v in placed[: min(n, limit)]]
    end = len(rounded)
    # a unit just below the n-th with the same rounded score may outrank it (facts first)
    while end < len(placed) and round(placed[end][1] / scale, 9) == rounded[-1]:
        if end >= limit:
            return None
        rounded.append(rounded[-1])
        end += 1
    order = sorted(range(end), key=lambda i: (-rounded[i], placed[i][0].kind != FACT, i))
    return [(placed[i][0].kind, placed[i][0].unit_id) for i in order[:n]]


TAIL_BELOW = 0.999  # the tail's first unit scores this share of the head's last


def fuse_candidates(
    lists: Mapping[str, tuple[str, Sequence[str]]],
    weights: Mapping[str, float],
    k: float,
    facts: Sequence[Candidate],
    events: Sequence[EventCandidate],
    diversity_penalty: float = 0.0,
    time_windows: Sequence[Window] = (),
    time_boost: float = 0.0,
    diversity_free: int = 1,
    diversity_start: int = 0,
    tail_lists: Sequence[str] = (),
    tail_start: int = 0,
    memo: PlacementMemo | None = None,
) -> tuple[list[Candidate], list[EventCandidate], dict[str, int]]:
    """The fused order applied to the candidates: each gets its normalised RRF score as
    ``formula`` and ``final`` (so the optional reranker blends into it as it does into the
    spec's formula) and ``scores["rrf"]``; units in no list are dropped, repeats removed.
    ``time_boost`` > 0 multiplies by ``1 + time_boost`` the score of units dated inside one of
    the query's ``time_windows`` (``timeexpr``); then ``diversity_penalty`` > 0 discounts
    units from a day already shown ``diversity_free`` times above (``diversity.diversify``),
    below the first ``diversity_start`` units. ``tail_start`` > 0: the lists named in
    ``tail_lists`` count only below the first ``tail_start`` units — those are the fusion
    of the other lists, the rest the fusion of all (ADR-0034). ``memo`` (one dict per call)
    keeps placements for a later fusion of the same call over the same lists (ADR-0041).
    Returns facts and turns best first, and how many units fusion dropped as repeats."""
    present, sources, when_of = _inputs(lists, facts, events)
    diversity = (diversity_penalty, diversity_free, diversity_start)
    placed, scale, n_fused = _place(present, weights, k, sources, when_of, time_windows, time_boost, diversity,
                                     memo)
    normalised = [(u, v / scale) for u, v in placed]
    head_weights = _head_weights(present, weights, tail_lists) if tail_start > 0 else None
    if head_weights is not None:
        head, head_scale, _ = _place(present, head_weights, k, sources, when_of, time_windows,
                                      time_boost, diversity, memo)
        normalised = _tail_only([(u, v / head_scale) for u, v in head], normalised, sources, tail_start)
    by_fact = {c.fact_id: c for c in facts}
    by_event = {e.message_id: e for e in events}
    out_facts: list[Candidate] = []
    out_events: list[EventCandidate] = []
    rank_keys = {name: f"rank_{name}" for name in lists}
    for unit, value in normalised:
        score = round(value, 9)
        ranks = {rank_keys[name]: float(rank) for name, rank in unit.ranks.items()}
        if unit.kind == FACT:
            cand = by_fact[unit.unit_id]
            cand.formula = cand.final = score
            cand.scores.update({"rrf": score, **ranks})
            out_facts.append(cand)
        else:
            ev = by_event[unit.unit_id]
            ev.formula = ev.final = score
            ev.scores.update({"rrf": score, **ranks})
            out_events.append(ev)
    return out_facts, out_events, {"fused": n_fused, "dropped_repeats": n_fused - len(normalised)}
