"""Which retrieve filters are containments of a turn's scope (``scope.scope_containments``,
ADR-0047): those are tested on the facts' own ``source_scope`` copy — one element, or an OR
of a few; the rest keep the source-turn test, so a filter the copy cannot spell exactly is
never approximated."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engramdb.services.retrieve.scope import (
    RetrieveFilter,
    narrowing,
    scope_containments,
)


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
    assert flt is not None and scope_containments(flt) == [element]
    compiled = narrowing(flt)
    assert compiled is not None and compiled.copied and json.loads(compiled.params["nwc"]) == [element]
    assert narrowing(flt, fact_copy=False).copied is False  # type: ignore[union-attr]


@pytest.mark.parametrize(("session", "tree", "elements"), [
    (["s1", "s2"], None, [{"s": "s1"}, {"s": "s2"}]),
    (None, {"OR": [{"a": 1}, {"b": 2}]}, [{"m": {"a": 1}}, {"m": {"b": 2}}]),
    (None, {"a": {"in": [1, 2]}}, [{"m": {"a": 1}}, {"m": {"a": 2}}]),
    (None, {"a": {"in": [1]}}, [{"m": {"a": 1}}]),
    ("s1", {"a": 1, "OR": [{"b": 1}, {"c": {"in": [2, 3]}}]},
     [{"s": "s1", "m": {"a": 1, "b": 1}}, {"s": "s1", "m": {"a": 1, "c": 2}}, {"s": "s1", "m": {"a": 1, "c": 3}}]),
    (["s1", "s2"], {"a": {"in": ["x", "y"]}},
     [{"s": "s1", "m": {"a": "x"}}, {"s": "s1", "m": {"a": "y"}}, {"s": "s2", "m": {"a": "x"}}, {"s": "s2", "m": {"a": "y"}}]),
    (None, {"AND": [{"a": {"in": [1, 2]}}, {"OR": [{"a": 1}, {"b": 2}]}]},  # {a:2} AND {a:1}: no branch
     None),
    (None, {"OR": [{"a": 1}, {"a": 1}]}, [{"m": {"a": 1}}]),
])
def test_an_or_of_such_is_one_containment_per_branch(session: Any, tree: Any, elements: Any) -> None:
    """``in``, ``OR`` and several sessions: one element per branch (``MetadataFilter.branches``),
    the fact's copy containing ONE of them; each its own parameter (``nwc``, ``nwc_1``, …)."""
    flt = RetrieveFilter.of(session, tree)
    assert flt is not None and scope_containments(flt) == elements
    compiled = narrowing(flt)
    assert compiled is not None
    if elements is None:
        assert not compiled.copied
        return
    assert compiled.copied
    names = ["nwc"] + [f"nwc_{i}" for i in range(1, len(elements))]
    assert [json.loads(compiled.params[n]) for n in names] == [[e] for e in elements]
    assert compiled.fact("f") == "coalesce(" + " OR ".join(f"f.source_scope @> %({n})s::jsonb" for n in names) + ", false)"


@pytest.mark.parametrize(("session", "tree"), [
    (None, {"NOT": [{"a": 1}]}),
    (None, {"a": {"ne": 1}}),
    (None, {"a": {"nin": [1]}}),
    (None, {"a": {"contains": "x"}}),
    (None, {"a": {"icontains": "x"}}),
    (None, {"a": {"eq": 1, "ne": 2}}),
    (None, {"a": 1, "AND": [{"a": 2}]}),  # a key equated to two values: not one object
    (None, {"OR": [{"a": 1}, {"NOT": [{"b": 1}]}]}),
    (None, {"a": {"in": list(range(17))}}),  # more branches than MAX_BRANCHES
    ([f"s{i}" for i in range(5)], {"a": {"in": [1, 2, 3, 4]}}),  # 5 x 4 > MAX_BRANCHES
])
def test_anything_else_keeps_the_source_turn_test(session: Any, tree: Any) -> None:
    flt = RetrieveFilter.of(session, tree)
    assert flt is not None and scope_containments(flt) is None
    compiled = narrowing(flt)
    assert compiled is not None and not compiled.copied and "nwc" not in compiled.params
