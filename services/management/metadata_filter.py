"""Metadata filters (issue 24): the and/or, eq/in/contains trees Mem0 users write, as SQL.

Why SQL and never Python: a filter applied after the top k returns fewer than k rows, or
none, while matching rows exist further down. So a filter is compiled here into a predicate
over a ``jsonb`` column with bound parameters (never text pasted into SQL) and the caller
puts it in its WHERE clause, before ordering and LIMIT.

The grammar (a JSON object; several keys in one object are ANDed):
- ``{"channel": "slack"}`` or ``{"channel": {"eq": "slack"}}`` — equality (jsonb ``@>``);
- ``{"channel": {"ne": "slack"}}``, ``{"in": [...]}``, ``{"nin": [...]}``;
- ``{"topic": {"contains": "trip"}}`` / ``{"icontains": ...}`` — a string value contains
  the text (case-insensitive with ``icontains``), or an array value holds the element;
- ``{"AND": [f, ...]}``, ``{"OR": [f, ...]}``, ``{"NOT": [f, ...]}`` (none of them).
Anything else is a ``ValueError`` naming where, so a misspelt operator is a 4xx, not a
filter that silently matches everything.
"""

from __future__ import annotations

import json
from typing import Any

from engramdb.infra.pgsql import escape_like

MAX_DEPTH = 8
MAX_CONDITIONS = 64
# a tree spelt as at most this many ORed containments (``branches``); more: the plain predicate
MAX_BRANCHES = 16
_LOGIC = ("AND", "OR", "NOT")
_OPS = ("eq", "ne", "in", "nin", "contains", "icontains")


class MetadataFilter:
    """A validated filter tree; ``sql(column, params)`` renders it for one query."""

    def __init__(self, tree: dict[str, Any]) -> None:
        self.tree = tree
        self._count = 0
        self._check(tree, "filters", 0)

    def _check(self, node: Any, path: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise ValueError(f"{path}: filters nest deeper than {MAX_DEPTH} levels")
        if not isinstance(node, dict) or not node:
            raise ValueError(f"{path}: a filter is a non-empty JSON object")
        for key, value in node.items():
            if key in _LOGIC:
                if not isinstance(value, list) or not value:
                    raise ValueError(f"{path}.{key}: must be a non-empty list of filters")
                for i, sub in enumerate(value):
                    self._check(sub, f"{path}.{key}[{i}]", depth + 1)
                continue
            if not isinstance(key, str) or not key or "\x00" in key:
                raise ValueError(f"{path}: metadata keys are non-empty strings")
            self._count += 1
            if self._count > MAX_CONDITIONS:
                raise ValueError(f"{path}: more than {MAX_CONDITIONS} conditions")
            if isinstance(value, dict):
                self._check_ops(value, f"{path}.{key}")
            _no_nul(value, f"{path}.{key}")

    @staticmethod
    def _check_ops(ops: dict[str, Any], path: str) -> None:
        if not ops:
            raise ValueError(f"{path}: an empty operator object")
        for op, arg in ops.items():
            if op not in _OPS:
                raise ValueError(f"{path}: unknown operator {op!r} (use one of {', '.join(_OPS)})")
            if op in ("in", "nin") and (not isinstance(arg, list) or not arg):
                raise ValueError(f"{path}.{op}: must be a non-empty list")
            if op in ("contains", "icontains") and not isinstance(arg, str | int | float | bool):
                raise ValueError(f"{path}.{op}: must be a string or a scalar")

    def branches(self, limit: int = MAX_BRANCHES) -> list[dict[str, Any]] | None:
        """The tree as ORed objects of ANDed equalities — ``column @> b1 OR column @> b2 …`` is
        then the whole predicate — or ``None`` when it is not one (``NOT``, ``ne``, ``nin``,
        ``contains``, ``icontains``, a key equated to two values) or would take more than
        ``limit`` objects. ``in`` is one object per value and ``OR`` one per branch, as
        ``sql`` renders them (``_op``, ``_node``); an AND distributes over them.

        Why: each object is one containment the copy of a turn's scope on a fact answers
        through its GIN index (ADR-0047). ``{"channel": {"in": [...]}}`` or an ``OR`` of two
        rare values were tested through each fact's source turns: ×1.2 and ×2.6 an
        unfiltered retrieve at 100k facts."""
        return _branches(self.tree, limit)

    def sql(self, column: str, params: dict[str, Any]) -> str:
        """The predicate over ``column`` (a jsonb expression); binds go into ``params``."""
        return self._node(self.tree, column, params)

    def _bind(self, params: dict[str, Any], value: Any) -> str:
        name = f"mf{len(params)}"
        while name in params:
            name += "_"
        params[name] = value
        return f"%({name})s"

    def _node(self, node: dict[str, Any], col: str, params: dict[str, Any]) -> str:
        parts: list[str] = []
        for key, value in node.items():
            if key in _LOGIC:
                subs = [self._node(sub, col, params) for sub in value]
                if key == "AND":
                    parts.append("(" + " AND ".join(subs) + ")")
                elif key == "OR":
                    parts.append("(" + " OR ".join(subs) + ")")
                else:
                    parts.append("NOT (" + " OR ".join(subs) + ")")
            elif isinstance(value, dict):
                parts.extend(self._op(key, op, arg, col, params) for op, arg in value.items())
            else:
                parts.append(self._eq(key, value, col, params))
        return "(" + " AND ".join(parts) + ")"

    def _eq(self, key: str, value: Any, col: str, params: dict[str, Any]) -> str:
        return f"{col} @> {self._bind(params, json.dumps({key: value}))}::jsonb"

    def _op(self, key: str, op: str, arg: Any, col: str, params: dict[str, Any]) -> str:
        if op == "eq":
            return self._eq(key, arg, col, params)
        if op == "ne":
            return f"NOT {self._eq(key, arg, col, params)}"
        if op in ("in", "nin"):
            anyof = "(" + " OR ".join(self._eq(key, v, col, params) for v in arg) + ")"
            return anyof if op == "in" else f"NOT {anyof}"
        k = self._bind(params, key)
        like = "ILIKE" if op == "icontains" else "LIKE"
        pattern = self._bind(params, f"%{escape_like(str(arg))}%")
        element = self._bind(params, json.dumps([arg]))
        return (f"(CASE jsonb_typeof({col} -> {k}) WHEN 'string' THEN ({col} ->> {k}) {like} "
                f"{pattern} WHEN 'array' THEN ({col} -> {k}) @> {element}::jsonb ELSE false END)")


def _branches(node: dict[str, Any], limit: int) -> list[dict[str, Any]] | None:
    out: list[dict[str, Any]] | None = [{}]
    for key, value in node.items():
        alternatives: list[dict[str, Any]] | None
        if key == "AND":
            for sub in value:
                out = _and(out, _branches(sub, limit), limit)
            continue
        if key == "OR":
            alternatives = []
            for sub in value:
                inner = _branches(sub, limit)
                if inner is None:
                    return None
                alternatives.extend(inner)
        elif key == "NOT":
            return None
        elif isinstance(value, dict):
            for op, arg in value.items():
                if op not in ("eq", "in"):
                    return None
                out = _and(out, [{key: arg}] if op == "eq" else [{key: v} for v in arg], limit)
            continue
        else:
            alternatives = [{key: value}]
        out = _and(out, alternatives, limit)
    return out


def _and(left: list[dict[str, Any]] | None, right: list[dict[str, Any]] | None,
         limit: int) -> list[dict[str, Any]] | None:
    """Every object of ``left`` merged with every one of ``right`` (distinct, in order);
    ``None`` when either is, a key would take two values, or more than ``limit`` result."""
    if left is None or right is None:
        return None
    out: dict[str, dict[str, Any]] = {}
    for a in left:
        for b in right:
            if any(k in a and _canonical(a[k]) != _canonical(v) for k, v in b.items()):
                return None  # jsonb containment of two values under one key: not one object
            merged = {**a, **b}
            out.setdefault(_canonical(merged), merged)
            if len(out) > limit:
                return None
    return list(out.values())


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _no_nul(value: Any, path: str) -> None:
    """A NUL character anywhere in a value (a string, a list's, an operator's argument) is a
    4xx here: PostgreSQL's text and jsonb cannot hold it, and the filter would otherwise fail
    in the database, a 500."""
    if isinstance(value, str):
        if "\x00" in value:
            raise ValueError(f"{path}: values cannot contain the NUL character")
    elif isinstance(value, list):
        for item in value:
            _no_nul(item, path)
    elif isinstance(value, dict):
        for key, item in value.items():
            _no_nul(key, path)
            _no_nul(item, path)
