"""Read-model tables declared as data: one ``Table`` names its columns once, and the CREATE
statement, the bulk-load column list and the vector index are all derived from it.

Why: the column list of a table used to be restated wherever rows were written (DDL, the
per-event INSERT, the rebuild's COPY); a column added in one place and not the others failed
only at run time. Now each read model module declares its ``Table``s and everything else reads
them.

Every table carries ``agent_id`` first in its key: nothing crosses agents, and every index
leads with it. Vectors are ``vector(d)`` with ``d`` fixed by the embedding model; switching
model means rebuilding the read model (the embedding cache keeps old vectors).
"""

from __future__ import annotations

from dataclasses import dataclass

VECTOR = "vector"  # column type placeholder: becomes vector(<dimensions of the embedder>)
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

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns)

    @property
    def row_columns(self) -> tuple[str, ...]:
        """Columns a row supplies (all but the vector, which is joined from the cache)."""
        return tuple(name for name, _ in self.columns if name != EMBEDDING)

    def create_sql(self, dimensions: int) -> str:
        d = int(dimensions)
        lines = [
            f"    {name} {f'vector({d})' if sql_type == VECTOR else sql_type}"
            for name, sql_type in self.columns
        ]
        lines.append(f"    PRIMARY KEY ({', '.join(self.primary_key)})")
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n" + ",\n".join(lines) + "\n)"

    def vector_index_sql(self) -> list[str]:
        """HNSW index on ``embedding``: built after bulk loads, so kept apart from ``indexes``."""
        if self.embedded_text is None:
            return []
        return [f"CREATE INDEX IF NOT EXISTS {self.name}_embedding_hnsw ON {self.name} {HNSW}"]

    def ddl(self, dimensions: int, vector_indexes: bool = True) -> list[str]:
        out = [self.create_sql(dimensions), *self.indexes]
        if vector_indexes:
            out.extend(self.vector_index_sql())
        return out


def tables_ddl(
    tables: tuple[Table, ...], dimensions: int, vector_indexes: bool = True
) -> list[str]:
    """CREATE statements (idempotent) for ``tables``, the vector extension first."""
    out = [VECTOR_EXTENSION_DDL]
    for table in tables:
        out.extend(table.ddl(dimensions, vector_indexes=False))
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
