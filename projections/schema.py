"""Every read model's DDL as one list, derived from ``READ_MODELS``.

For tools and tests that set up the read-model tables without running projectors (retrieval
fixtures, benchmarks): the projectors create their own tables when they start. The tables
themselves are declared by their read model (``projections/read_models/``).
"""

from __future__ import annotations

from engramdb.projections.read_models import READ_MODELS
from engramdb.projections.tables import tables_ddl

READ_MODEL_TABLES: tuple[str, ...] = tuple(t for rm in READ_MODELS for t in rm.table_names)


def read_model_ddl(dimensions: int) -> list[str]:
    """CREATE statements for every read model table (idempotent), without vector indexes."""
    tables = tuple(t for rm in READ_MODELS for t in rm.tables)
    return tables_ddl(tables, dimensions, vector_indexes=False)


def vector_index_ddl() -> list[str]:
    """HNSW indexes, created after the tables (and after bulk loads, when rebuilding)."""
    return [s for rm in READ_MODELS for t in rm.tables for s in t.vector_index_sql()]
