"""Read-model tables declared as data: one ``Table`` names its columns once, and the CREATE
statement, the bulk-load column list and the vector index are all derived from it.

Why: the column list of a table used to be restated wherever rows were written (DDL, the
per-event INSERT, the rebuild's COPY); a column added in one place and not the others failed
only at run time. Now each read model module declares its ``Table``s and everything else reads
them.

Every table carries ``agent_id`` first in its key: nothing crosses agents, and every index
leads with it (the full-text GIN indexes excepted: GIN cannot lead with a text column without
btree_gin, so the agent filter is applied after the index lookup). Vectors are ``vector(d)`` with ``d`` fixed by the embedding model; switching
model means rebuilding the read model (the embedding cache keeps old vectors).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

VECTOR = "vector"  # column type placeholder: becomes vector(<dimensions of the embedder>)
# Vectors are stored in the row (``STORAGE MAIN``), not in TOAST: pgvector's default
# (``EXTERNAL``) moves a 384-d vector out of a row that passes ~2 KB — every turn with a
# sentence or two of text — and each distance the exact search or a hydration computes then
# reads the TOAST index and its pages (~7 buffers a row instead of 1; 1000 turns: 5.4 vs
# 1.2 ms). MAIN keeps it in the row and moves the text out first; a row that still cannot
# fit a page (thousands of dimensions) is moved out as the last resort, as before.
VECTOR_STORAGE = "STORAGE MAIN"
EMBEDDING = "embedding"  # the vector column of an embedded table
HNSW = "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)"

VECTOR_EXTENSION_DDL = "CREATE EXTENSION IF NOT EXISTS vector"


@dataclass(frozen=True)
class Table:
    """One read-model table: ordered ``(column, SQL type and constraints)`` pairs, its key,
    secondary indexes, and — for embedded tables — the column whose text is embedded."""

    name: str
    columns: tuple[tuple[str, str], ...]
    primary_key: tuple[str, ...]
    indexes: tuple[str, ...] = ()
    embedded_text: str | None = None
    # the SQL of the exact string embedded, ``{row}`` standing for the row's alias, when it is
    # not just ``embedded_text`` (rebuild joins the embedding cache on its hash; the view must
    # embed the very same string in Python)
    embedded_sql: str | None = None
    # the same string in Python, from the row's values by column (rebuild looks vectors up by
    # its hash client-side); None = the value of ``embedded_text``
    embedded_python: Callable[[dict[str, Any]], str] | None = None
    # ``(column, "type GENERATED ALWAYS AS (...) STORED")``: PostgreSQL computes them, so rows
    # never supply them (not in ``row_columns``); a table created before they were declared
    # gains them through ``ALTER TABLE ... ADD COLUMN IF NOT EXISTS`` (existing rows computed)
    generated: tuple[tuple[str, str], ...] = ()
    # statements the table's DDL needs first: the functions its generated columns call
    functions: tuple[str, ...] = ()
    # columns declared after tables were already in users' databases: a table created before
    # gains them through ``ADD COLUMN IF NOT EXISTS`` (nullable or with a DEFAULT; the events
    # that fill them fold onto the defaults, so a rebuild is not required)
    added: tuple[str, ...] = ()
    # secondary indexes a later one replaced: a database created before keeps them (CREATE
    # INDEX IF NOT EXISTS adds the new one beside), so the schema setup drops them; a table's
    # writes then maintain only the indexes ``indexes`` names
    retired_indexes: tuple[str, ...] = ()
    # idempotent statements the schema setup runs after every table's DDL (so they may read
    # the model's other tables): fill an ``added`` column from what an older database holds.
    # Never run on a rebuild's shadow, which is built from the log
    backfills: tuple[str, ...] = ()

    def embedded_expression(self, row: str) -> str:
        """SQL of the embedded string for rows aliased ``row``."""
        if self.embedded_sql is not None:
            return self.embedded_sql.format(row=row)
        return f'{row}."{self.embedded_text}"'

    @property
    def python_embedded_text(self) -> Callable[[tuple[Any, ...]], str]:
        """row tuple (``row_columns`` order) -> the string embedded for it (= ``embedded_sql``)."""
        cols = self.row_columns
        if self.embedded_python is None:
            index = cols.index(str(self.embedded_text))
            return lambda row: str(row[index])
        fn = self.embedded_python
        return lambda row: fn(dict(zip(cols, row, strict=True)))

    def create_sql(self, dimensions: int, primary_key: bool = True) -> str:
        d = int(dimensions)
        lines = [
            f"    {name} {f'vector({d}) {VECTOR_STORAGE}' if sql_type == VECTOR else sql_type}"
            for name, sql_type in self.columns + self.generated
        ]
        if primary_key:
            lines.append(f"    PRIMARY KEY ({', '.join(self.primary_key)})")
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n" + ",\n".join(lines) + "\n)"

    def primary_key_sql(self) -> str:
        """The key added after a bulk load (same constraint name as ``create_sql`` gives)."""
        return (f"ALTER TABLE {self.name} ADD CONSTRAINT {self.name}_pkey "
                f"PRIMARY KEY ({', '.join(self.primary_key)})")

    @property
    def row_columns(self) -> tuple[str, ...]:
        """Columns a row supplies (all but the vector, which is joined from the cache)."""
        return tuple(name for name, _ in self.columns if name != EMBEDDING)

    def vector_index_sql(self) -> list[str]:
        """HNSW index on ``embedding``: built after bulk loads, so kept apart from ``indexes``."""
        if self.embedded_text is None:
            return []
        return [f"CREATE INDEX IF NOT EXISTS {self.name}_embedding_hnsw ON {self.name} {HNSW}"]

    def add_generated_sql(self) -> list[str]:
        """``ADD COLUMN IF NOT EXISTS`` per generated column: an older table gains them (its
        existing rows computed by PostgreSQL); a no-op on a table created with them. And the
        vectors' storage (``VECTOR_STORAGE``) for a table created before it: rows written from
        then on keep their vector in the row (a rebuild rewrites the older ones)."""
        added = [(name, sql_type) for name, sql_type in self.columns if name in self.added]
        return [
            f"ALTER TABLE {self.name} ADD COLUMN IF NOT EXISTS {name} {sql_type}"
            for name, sql_type in added + list(self.generated)
        ] + [self._vector_storage_sql(name) for name, sql_type in self.columns if sql_type == VECTOR]

    def _vector_storage_sql(self, column: str) -> str:
        """``SET STORAGE MAIN`` only when the column is not MAIN yet: the ALTER rewrites the
        catalog row and resets every session's cached plans of the table, each start-up."""
        return (f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = "
                f"'{self.name}'::regclass AND attname = '{column}' AND attstorage <> 'm') THEN "
                f"ALTER TABLE {self.name} ALTER COLUMN {column} SET {VECTOR_STORAGE}; END IF; END $$")

    def ddl(self, dimensions: int, vector_indexes: bool = True) -> list[str]:
        out = [*self.functions, self.create_sql(dimensions), *self.add_generated_sql(),
               *self.indexes, *(f"DROP INDEX IF EXISTS {name}" for name in self.retired_indexes)]
        if vector_indexes:
            out.extend(self.vector_index_sql())
        return out


def tables_ddl(
    tables: tuple[Table, ...], dimensions: int, vector_indexes: bool = True
) -> list[str]:
    """CREATE statements (idempotent) for ``tables``: the vector extension first, then the
    functions the tables need (each once), then the tables."""
    out = [VECTOR_EXTENSION_DDL, *dict.fromkeys(f for t in tables for f in t.functions)]
    for table in tables:
        out.extend(s for s in table.ddl(dimensions, vector_indexes=False)
                   if s not in table.functions)
    out.extend(s for table in tables for s in table.backfills)
    if vector_indexes:
        for table in tables:
            out.extend(table.vector_index_sql())
    return out


# ----- shared by every read model (never dropped by a rebuild) ---------------------------

EMBEDDING_CACHE_DDL = [
    VECTOR_EXTENSION_DDL,
    """CREATE TABLE IF NOT EXISTS mem_embedding_cache (
        model_id text NOT NULL,
        text_hash text NOT NULL,
        embedding vector NOT NULL,
        PRIMARY KEY (model_id, text_hash)
    )""",
]
# read model name -> embedding model its vector columns were built with (rebuild resets it)
READ_MODEL_META_DDL = [
    """CREATE TABLE IF NOT EXISTS mem_read_model_meta (
        projection text PRIMARY KEY,
        embedding_model text NOT NULL,
        dimensions integer NOT NULL,
        built_at timestamptz NOT NULL DEFAULT now()
    )""",
]
