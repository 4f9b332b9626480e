"""Cells: which event store an agent lives in (issue 13 item 3, ADR-0028).

A *cell* is one independent event store with its own read models and projectors: a PostgreSQL
schema in the one database, or a schema in a database of its own. Agents never span cells, so
nothing (aggregates, per-agent order, retrieve, audit) ever needs two cells at once, and each
cell's notification log grows — and is projected, rebuilt and vacuumed — on its own. This
module is the ONE place that decides where an agent goes; everything else asks it.

``ENGRAMDB_CELLS`` (``Settings.cells``):

- unset, ``""`` or ``1``: one cell — ``ENGRAMDB_DATABASE_URL`` (or the embedded server) and
  ``ENGRAMDB_DB_SCHEMA``, exactly the tables and events of a deployment without cells;
- an integer ``N >= 2``: N schemas in that database, ``<base>_cell<i>`` for ``i`` in
  ``0..N-1``, where ``<base>`` is ``ENGRAMDB_DB_SCHEMA`` (``engramdb`` when that is
  ``public``);
- a JSON list, one entry per cell in hash order: a schema name (``"team_a"``), a libpq URL
  (``"postgresql://u:p@db2/mem"``, in schema ``ENGRAMDB_DB_SCHEMA``), or an object
  ``{"name": ..., "url": ..., "schema": ...}`` (every key optional). Cells must differ in
  (url, schema).

Routing: ``cell_index(agent_id, n)`` is the first 8 bytes of ``blake2b(agent_id)`` (UTF-8,
big-endian) modulo ``n`` — stable across processes, machines and Python versions (unlike
``hash()``), and uniform. Changing the number or order of cells re-maps agents: re-sharding
needs a migration (ADR-0028) and is out of scope.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

_SCHEMA = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")


class CellsConfigError(ValueError):
    """``ENGRAMDB_CELLS`` cannot be understood; the message says what a valid value is."""


@dataclass(frozen=True)
class CellSpec:
    """One cell: ``url`` None means "the deployment's database" (external or embedded)."""

    name: str
    schema: str
    url: str | None = None


def cell_index(agent_id: str, cells: int) -> int:
    """The cell of ``agent_id`` among ``cells`` (see the module doc for the exact rule)."""
    if cells <= 1:
        return 0
    digest = hashlib.blake2b(agent_id.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % cells


def parse_cells(value: str | None, db_schema: str = "public") -> list[CellSpec]:
    """The cells ``ENGRAMDB_CELLS`` names, in hash order (one cell when unset)."""
    text = (value or "").strip()
    if text in ("", "1"):
        return [CellSpec(name=db_schema, schema=db_schema)]
    if text.isdigit():
        count = int(text)
        if count < 1:
            raise CellsConfigError(_HELP.format(value=value))
        base = "engramdb" if db_schema == "public" else db_schema
        return [CellSpec(name=f"cell{i}", schema=f"{base}_cell{i}") for i in range(count)]
    try:
        entries = json.loads(text)
    except json.JSONDecodeError:
        raise CellsConfigError(_HELP.format(value=value)) from None
    if not isinstance(entries, list) or not entries:
        raise CellsConfigError(_HELP.format(value=value))
    specs = [_entry(entry, i, db_schema) for i, entry in enumerate(entries)]
    seen: set[tuple[str | None, str]] = set()
    for spec in specs:
        if (spec.url, spec.schema) in seen:
            raise CellsConfigError(
                f"ENGRAMDB_CELLS names schema {spec.schema!r} of one database twice: "
                "each cell needs its own schema or database"
            )
        seen.add((spec.url, spec.schema))
    if len({spec.name for spec in specs}) != len(specs):
        raise CellsConfigError("ENGRAMDB_CELLS: cell names must be distinct")
    return specs


def _entry(entry: object, index: int, db_schema: str) -> CellSpec:
    if isinstance(entry, str):
        entry = {"url": entry} if ("://" in entry or "=" in entry) else {"schema": entry}
    if not isinstance(entry, dict) or not set(entry) <= {"name", "url", "schema"}:
        raise CellsConfigError(
            f"ENGRAMDB_CELLS entry {index} ({entry!r}) must be a schema name, a database URL "
            'or {"name": ..., "url": ..., "schema": ...}'
        )
    schema = str(entry.get("schema") or db_schema)
    if not _SCHEMA.match(schema):
        raise CellsConfigError(f"ENGRAMDB_CELLS entry {index}: {schema!r} is not a schema name")
    url = entry.get("url")
    name = str(entry.get("name") or (schema if url is None else f"cell{index}"))
    return CellSpec(name=name, schema=schema, url=str(url) if url else None)


_HELP = (
    "ENGRAMDB_CELLS={value!r} is not understood: give a number of cells (schemas in the one "
    'database, e.g. 4) or a JSON list of schema names / database URLs (e.g. ["cell_a", '
    '"postgresql://u:p@db2/mem"]); unset means one cell'
)
