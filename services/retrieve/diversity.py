"""Diversity across sources in the fused ranking (issue 9 lever (a), ADR-0021).

Why: a question whose evidence lies in several conversations ("what do X and Y have in
common?", "how did X's plans change?") loses its second half when the top k fills with
near-duplicates from one day's talk. After fusion, each unit's score is multiplied by
``(1 - penalty) ** n`` where ``n`` counts the units of the same source already placed above
it beyond the first ``free`` (greedy, so the output stays sorted by the score it carries: a penalised unit can never
sit above a higher score). The source is the calendar day (UTC) a fact became valid or a turn
was said: facts and turns of one conversation share it without a lookup, and it needs no
session bookkeeping from the writer. ``penalty = 0`` is the identity. Pure, no I/O.

``start`` > 0 keeps the first ``start`` units where fusion put them (they still count as
shown) and discounts only below them (ADR-0034): the top of the ranking, where one session's
several turns are usually the answer, stays as fused, and only the tail is spread across
sources — for questions whose evidence lies in several conversations.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from typing import TypeVar

T = TypeVar("T")


def diversify(
    units: Sequence[T], scores: Sequence[float], keys: Sequence[Hashable | None], penalty: float,
    free: int = 1, start: int = 0,
) -> list[tuple[T, float]]:
    """``units`` best first with their ``scores`` (non-increasing) and source ``keys`` (None:
    unknown, never penalised); the first ``free`` units of a source are not discounted, nor
    the first ``start`` units of the ranking (which still count as shown).
    Returns (unit, new score) best first. O(n · sources)."""
    if free < 1:
        raise ValueError(f"free must be at least 1, got {free}")
    if start < 0:
        raise ValueError(f"start must be at least 0, got {start}")
    if not 0.0 <= penalty <= 1.0:
        raise ValueError(f"penalty must be within [0, 1], got {penalty}")
    if penalty == 0.0 or len(units) <= start:
        return list(zip(units, scores, strict=True))
    factor = 1.0 - penalty
    queues: dict[Hashable, deque[int]] = {}
    order: list[Hashable] = []  # first appearance: deterministic tie-break
    for i, key in enumerate(keys):
        group: Hashable = ("__unkeyed__", i) if key is None else key
        if group not in queues:
            queues[group] = deque()
            order.append(group)
        queues[group].append(i)
    placed = {group: 0 for group in order}
    out: list[tuple[T, float]] = []
    for i in range(start):  # kept as fused
        group = ("__unkeyed__", i) if keys[i] is None else keys[i]
        queues[group].popleft()
        placed[group] += 1
        out.append((units[i], scores[i]))
    while len(out) < len(units):
        best_group: Hashable | None = None
        best_value = -1.0
        best_index = len(units)
        for group in order:
            queue = queues[group]
            if not queue:
                continue
            value = scores[queue[0]] * factor ** max(0, placed[group] + 1 - free)
            # higher value first; on a tie, the unit fusion ranked higher
            if value > best_value or (value == best_value and queue[0] < best_index):
                best_group, best_value, best_index = group, value, queue[0]
        assert best_group is not None
        queues[best_group].popleft()
        placed[best_group] += 1
        out.append((units[best_index], best_value))
    return out
