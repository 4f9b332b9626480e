"""A fact's source scope as exact keys (``engramdb_scope_keys(source_scope)``, indexed), for a
retrieve narrowed to sessions or to single metadata values (ADR-0047).

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

Changing the function does not recompute the index: change it only with a rebuild (or REINDEX).
"""

from __future__ import annotations

from typing import Any

# PL/pgSQL: 7.4 µs a fact against 10–11 for the same in one SQL statement (two set-returning
# scans, an aggregate); paid when the index is built (0.8 s at 100k facts) and per write
SCOPE_KEYS_FUNCTION = """CREATE OR REPLACE FUNCTION engramdb_scope_keys(scope jsonb) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $f$
DECLARE e jsonb; kv record; keys text[] := '{}';
BEGIN
  IF jsonb_typeof(scope) <> 'array' THEN RETURN keys; END IF;
  FOR e IN SELECT * FROM jsonb_array_elements(scope) LOOP
    IF jsonb_typeof(e->'s') = 'string' THEN keys := keys || ('s:' || (e->>'s')); END IF;
    IF jsonb_typeof(e->'m') = 'object' THEN
      FOR kv IN SELECT * FROM jsonb_each(e->'m') LOOP
        IF jsonb_typeof(kv.value) IN ('string', 'boolean') THEN
          keys := keys || ('m' || left(jsonb_typeof(kv.value), 1) || length(kv.key) || ':' || kv.key
                           || '=' || (kv.value #>> '{}'));
        END IF;
      END LOOP;
    END IF;
  END LOOP;
  RETURN keys;
END $f$"""

# an index on the expression, not a stored column: adding a generated column to a table in use
# rewrites it and rebuilds every index (70 s at 100k facts, the HNSW index most of it, under a
# lock that blocks readers); an index is built beside the rows (readers go on)
SCOPE_KEYS_INDEX = ("CREATE INDEX IF NOT EXISTS mem_facts_scope_keys ON mem_facts "
                    "USING gin (engramdb_scope_keys(source_scope))")


def scope_keys_sql(alias: str) -> str:
    """The indexed expression for the ``mem_facts`` row aliased ``alias`` (spelt as the index
    is, or the planner cannot use it)."""
    return f"engramdb_scope_keys({alias}.source_scope)"


def scope_key(element: dict[str, Any]) -> str | None:
    """The key of a filter element (``{"s": session}`` or ``{"m": {key: value}}``) that a
    fact's keys (``engramdb_scope_keys``) hold exactly when its ``source_scope`` contains
    ``[element]``; ``None`` when there is none (see the module's docstring)."""
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
