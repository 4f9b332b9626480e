"""Metadata filters compile to SQL with bound parameters, and refuse what they cannot mean
(issue 24, ``services/management/metadata_filter.py``). The SQL runs against PostgreSQL in
``tests/integration/test_scopes_metadata.py``; here: the grammar and its errors."""

from __future__ import annotations

import pytest

from engramdb.services.management.metadata_filter import MAX_CONDITIONS, MetadataFilter
from engramdb.services.memory.mem0_shapes import (
    Mem0Error,
    Scope,
    Unsupported,
    mem0_id,
    parse_mem0_id,
    split_filters,
)


def test_values_are_bound_never_pasted() -> None:
    params: dict[str, object] = {}
    sql = MetadataFilter({"channel": "x'); DROP TABLE mem_facts; --"}).sql("m.metadata", params)
    assert "DROP" not in sql and "%(mf0)s" in sql
    assert params == {"mf0": '{"channel": "x\'); DROP TABLE mem_facts; --"}'}


def test_operators_and_logic_render() -> None:
    params: dict[str, object] = {"a": "agent"}
    sql = MetadataFilter({"OR": [{"channel": {"in": ["slack", "email"]}},
                                 {"NOT": [{"topic": {"icontains": "50%"}}]}]}).sql("c", params)
    assert sql.count("@>") >= 2 and " OR " in sql and "NOT (" in sql and "ILIKE" in sql
    assert "a" in params and any(v == "%50\\%%" for v in params.values())  # LIKE is escaped


@pytest.mark.parametrize("tree, where", [
    ({}, "non-empty"),
    ({"channel": {"regex": "x"}}, "unknown operator 'regex'"),
    ({"channel": {"in": []}}, "non-empty list"),
    ({"AND": {"channel": "x"}}, "non-empty list of filters"),
    ({"channel": {"contains": ["x"]}}, "string or a scalar"),
    ({"k": {}}, "empty operator"),
    ({"k": "a\x00b"}, "NUL"),
    ({"OR": [{"k": {"in": ["v", "a\x00b"]}}]}, "NUL"),
    ({"k": {"contains": "\x00"}}, "NUL"),
])
def test_a_misspelt_filter_is_an_error_naming_where(tree: dict, where: str) -> None:
    with pytest.raises(ValueError, match=where):
        MetadataFilter(tree)


def test_size_and_depth_are_bounded() -> None:
    with pytest.raises(ValueError, match="conditions"):
        MetadataFilter({f"k{i}": i for i in range(MAX_CONDITIONS + 1)})
    deep: dict = {"k": 1}
    for _ in range(12):
        deep = {"AND": [deep]}
    with pytest.raises(ValueError, match="deeper"):
        MetadataFilter(deep)


def test_the_widest_scope_is_the_memory_and_the_narrower_ones_filter_it() -> None:
    scope = Scope(user_id="ana", agent_id="support", run_id="chat-1")
    assert scope.memory_key == "user:ana"
    assert scope.narrowing() == {"agent_id": "support", "run_id": "chat-1"}
    assert Scope(agent_id="support").memory_key == "agent:support"
    assert Scope(run_id="r").memory_key == "run:r"
    with pytest.raises(Mem0Error, match="At least one"):
        _ = Scope().memory_key
    found, tree = split_filters({"AND": [{"user_id": "ana"}, {"run_id": "chat-1"},
                                         {"metadata": {"channel": "slack"}}]}, {})
    assert found.memory_key == "user:ana"
    assert tree == {"AND": [{"channel": "slack"}, {"run_id": "chat-1"}]}
    with pytest.raises(Unsupported, match="created_at"):
        split_filters({"user_id": "ana", "created_at": {"gte": "2024-01-01"}}, {})


def test_mem0_ids_route_to_their_memory_and_junk_is_a_404() -> None:
    ident = mem0_id("f_0123", "user:ana@example.com")
    assert "/" not in ident and parse_mem0_id(ident) == ("f_0123", "user:ana@example.com")
    for junk in ("nope", "f_1.!!!", ".", "f_1." + "A" * 3):
        with pytest.raises(Mem0Error) as err:
            parse_mem0_id(junk)
        assert err.value.status == 404
