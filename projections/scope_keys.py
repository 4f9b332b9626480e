"""A fact's source scope as exact keys (``mem_facts.scope_keys``), for a retrieve narrowed to
sessions or to single metadata values (ADR-0047).

``source_scope`` holds one ``{"s": session, "m": metadata}`` per source turn, and its GIN
index (``jsonb_path_ops``) finds the facts whose copy contains a filter's element. That index
is lossy — it stores hashes of paths and values — so PostgreSQL re-tests every row it returns:
an OR of ten session containments on each of the 10,000 facts of ten sessions at 100k facts.
Measured, that re-test is most of the exact read: 17.8 ms for the nearest 60 of those facts,
5.5 ms when the same rows come from a ``text[]`` GIN index, whose overlap (``&&``) test is exact
and re-tests nothing.

The keys: ``s:<session>`` per source turn with a session; per top-level metadata value that is
a string or a boolean, ``ms<n>:<key>=<text>`` / ``mb<n>:<key>=true|false`` (``n``: the key's
length, so that no key and value can be read as another split of the same text). A filter
element of one session, or of one such key and value, is contained in a fact's copy exactly
when its key is among the fact's keys (jsonb containment of a string or boolean is equality;
of an element, that one source turn holds it). Anything else — a number (``1`` and ``1.0``
are contained in each other, their texts differ), a null, a nested value, a session AND a
value (one turn must hold both) — has no key and keeps the containment test.

Changing the function does not recompute stored values: change it only with a rebuild.
"""

from __future__ import annotations

from typing import Any

SCOPE_KEYS_FUNCTION = (
    "CREATE OR REPLACE FUNCTION engramdb_scope_keys(jsonb) RETURNS text[]"
    " LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$"
    " SELECT coalesce(array_agg(DISTINCT k ORDER BY k), '{}') FROM ("
    " SELECT 's:' || (e->>'s') AS k FROM jsonb_array_elements("
    "CASE WHEN jsonb_typeof($1) = 'array' THEN $1 ELSE '[]'::jsonb END) e"
    " WHERE jsonb_typeof(e->'s') = 'string'"
    " UNION ALL"
    " SELECT 'm' || left(jsonb_typeof(kv.value), 1) || length(kv.key) || ':' || kv.key || '='"
    " || (kv.value #>> '{}') FROM jsonb_array_elements("
    "CASE WHEN jsonb_typeof($1) = 'array' THEN $1 ELSE '[]'::jsonb END) e,"
    " jsonb_each(CASE WHEN jsonb_typeof(e->'m') = 'object' THEN e->'m' ELSE '{}'::jsonb END) kv"
    " WHERE jsonb_typeof(kv.value) IN ('string', 'boolean')) x $$"
)

SCOPE_KEYS_COLUMN = ("scope_keys", "text[] GENERATED ALWAYS AS (engramdb_scope_keys(source_scope)) STORED")

SCOPE_KEYS_INDEX = "CREATE INDEX IF NOT EXISTS mem_facts_scope_keys ON mem_facts USING gin (scope_keys)"


def scope_key(element: dict[str, Any]) -> str | None:
    """The key of a filter element (``{"s": session}`` or ``{"m": {key: value}}``) that a
    fact's ``scope_keys`` holds exactly when its ``source_scope`` contains ``[element]``;
    ``None`` when there is none (see the module's docstring)."""
    if set(element) == {"s"} and isinstance(element["s"], str):
        return f"s:{element['s']}"
    if set(element) != {"m"} or not isinstance(element["m"], dict) or len(element["m"]) != 1:
        return None
    ((key, value),) = element["m"].items()
    if isinstance(value, bool):
        return f"mb{len(key)}:{key}={'true' if value else 'false'}"
    if isinstance(value, str):
        return f"ms{len(key)}:{key}={value}"
    return None


def scope_keys_of(elements: list[dict[str, Any]]) -> list[str] | None:
    """The keys of every element, or ``None`` when one of them has none."""
    keys = [scope_key(e) for e in elements]
    return None if any(k is None for k in keys) else [k for k in keys if k is not None]
