"""ADR-0041: the server freezes its start-up heap; garbage made afterwards is still collected."""

from __future__ import annotations

import gc
import weakref

from engramdb.services.entrypoints.serve.startup_heap import settle


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def test_settle_freezes_what_lives_and_later_cycles_are_still_collected() -> None:
    try:
        frozen = settle()
        # this process's modules, at least (the count only falls after: a frozen object can
        # still die by reference counting, on any thread)
        assert frozen > 1000 and 0 < gc.get_freeze_count() <= frozen
        a, b = _Node(), _Node()
        a.other, b.other = b, a  # a cycle made after start-up: only the collector frees it
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()  # the rest of the test session keeps the collector as it was
