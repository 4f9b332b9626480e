"""Which retrieve filters are one containment of a turn's scope (``scope.scope_containment``,
ADR-0047): those are tested on the facts' own ``source_scope`` copy; the rest keep the
source-turn test, so a filter the copy cannot spell exactly is never approximated."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engramdb.services.retrieve.scope import RetrieveFilter, narrowing, scope_containment


@pytest.mark.parametrize(("session", "tree", "element"), [
    ("s1", None, {"s": "s1"}),
    (None, {"channel": "slack"}, {"m": {"channel": "slack"}}),
    (None, {"channel": {"eq": "slack"}, "tier": 2}, {"m": {"channel": "slack", "tier": 2}}),
    ("s1", {"AND": [{"a": 1}, {"AND": [{"b": [1, 2]}]}]}, {"s": "s1", "m": {"a": 1, "b": [1, 2]}}),
    (None, {"nested": {"eq": {"x": 1}}}, {"m": {"nested": {"x": 1}}}),
])
def test_equalities_and_one_session_are_one_containment(session: str | None, tree: Any,
                                                        element: dict[str, Any]) -> None:
    flt = RetrieveFilter.of(session, tree)
    assert flt is not None and scope_containment(flt) == element
    compiled = narrowing(flt)
    assert compiled is not None and compiled.copied and json.loads(compiled.params["nwc"]) == [element]
    assert narrowing(flt, fact_copy=False).copied is False  # type: ignore[union-attr]


@pytest.mark.parametrize(("session", "tree"), [
    (["s1", "s2"], None),
    (None, {"OR": [{"a": 1}, {"b": 2}]}),
    (None, {"NOT": [{"a": 1}]}),
    (None, {"a": {"ne": 1}}),
    (None, {"a": {"in": [1, 2]}}),
    (None, {"a": {"nin": [1]}}),
    (None, {"a": {"contains": "x"}}),
    (None, {"a": {"icontains": "x"}}),
    (None, {"a": {"eq": 1, "ne": 2}}),
    (None, {"a": 1, "AND": [{"a": 2}]}),  # a key equated twice: not one object
    ("s1", {"a": 1, "OR": [{"b": 1}]}),
])
def test_anything_else_keeps_the_source_turn_test(session: Any, tree: Any) -> None:
    flt = RetrieveFilter.of(session, tree)
    assert flt is not None and scope_containment(flt) is None
    compiled = narrowing(flt)
    assert compiled is not None and not compiled.copied and "nwc" not in compiled.params
