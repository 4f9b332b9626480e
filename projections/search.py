"""The BM25 search columns of the read models: one analysis chain for the stored documents
and the query (``services/retrieve/signals/bm25.py``), defined once as SQL functions.

Why in SQL: BM25 needs term frequencies, document lengths and document frequencies over the
agent's rows; stored generated columns (``search_tsv``, ``search_len``) keep them next to the
row, filled by PostgreSQL on INSERT, on the rebuild's COPY and — through ``ADD COLUMN IF NOT
EXISTS`` — for the rows of an older table. The query is analysed by the same function, so a
word matches exactly when the document's lexeme is the query's.

Analysis: lower-case + accent folding (``engramdb_fold``; the bundled PostgreSQL has no
``unaccent`` extension, so ``translate()`` of the Latin accented letters Portuguese and the
other Western languages use), then the built-in ``english`` configuration (Snowball stemming,
English stop words dropped). Folding before stemming makes 'você'/'voce' and 'São Paulo'/'sao
paulo' the same lexemes.

Changing a function body does not recompute stored values: change it only with a rebuild.
"""

from __future__ import annotations

_ACCENTED = "áàâãäåéèêëíìîïóòôõöúùûüçñýÿÁÀÂÃÄÅÉÈÊËÍÌÎÏÓÒÔÕÖÚÙÛÜÇÑÝ"
_PLAIN = "aaaaaaeeeeiiiiooooouuuucnyyaaaaaaeeeeiiiiooooouuuucny"
assert len(_ACCENTED) == len(_PLAIN)

# lower() alone misses non-ASCII capitals under the C locale: the upper-case letters are
# translated too. An ASCII-only text (most of them) skips the translate(), whose result would be
# lower($1) anyway: translate() of a 54-letter multibyte set cost ~7 µs a row, 3/4 of the
# generated search columns' time in a rebuild's COPY (ADR-0036); the regex check is ~1 µs.
FOLD_FUNCTION = (
    "CREATE OR REPLACE FUNCTION engramdb_fold(text) RETURNS text"
    " LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE"
    " AS $$ SELECT CASE WHEN $1 ~ '^[[:ascii:]]*$' THEN lower($1)"
    f" ELSE translate(lower($1), '{_ACCENTED}', '{_PLAIN}') END $$"
)
TSV_FUNCTION = (
    "CREATE OR REPLACE FUNCTION engramdb_tsv(text) RETURNS tsvector"
    " LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE"
    " AS $$ SELECT to_tsvector('english'::regconfig, engramdb_fold($1)) $$"
)
# document length in tokens (stop words excluded): a lexeme's positions are its occurrences;
# a stripped lexeme (no positions) counts once
TSV_LEN_FUNCTION = (
    "CREATE OR REPLACE FUNCTION engramdb_tsv_len(tsvector) RETURNS integer"
    " LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE"
    " AS $$ SELECT coalesce(sum(coalesce(array_length(t.positions, 1), 1)), 0)::integer"
    " FROM unnest($1) t $$"
)
SEARCH_FUNCTIONS = (FOLD_FUNCTION, TSV_FUNCTION, TSV_LEN_FUNCTION)


def search_columns(document_sql: str) -> tuple[tuple[str, str], ...]:
    """``search_tsv`` and ``search_len`` generated from ``document_sql`` (an expression over
    the row's columns; a generated column cannot reference another, hence both from it)."""
    return (
        ("search_tsv", f"tsvector GENERATED ALWAYS AS (engramdb_tsv({document_sql})) STORED"),
        ("search_len",
         f"integer GENERATED ALWAYS AS (engramdb_tsv_len(engramdb_tsv({document_sql}))) STORED"),
    )


def search_index(table: str) -> str:
    """GIN on ``search_tsv``: candidates by lexeme (the agent filter is applied after it)."""
    return f"CREATE INDEX IF NOT EXISTS {table}_search_tsv ON {table} USING gin (search_tsv)"


# BM25's corpus statistics (N, average length) of a large agent are estimated from a fixed
# 1/64 sample of its rows, chosen by a hash of the row's id (the same rows every time, so the
# same memory gives the same scores); ``services/retrieve/signals/bm25.py``, ADR-0024.
SAMPLE_BUCKETS = 64


def sample_bucket(id_sql: str) -> str:
    """The row's sample bucket (0 .. SAMPLE_BUCKETS-1): the expression the stats index holds."""
    return f"(hashtext({id_sql}) & {SAMPLE_BUCKETS - 1})"


def stats_index(table: str, id_col: str, include: tuple[str, ...], where: str = "") -> str:
    """B-tree read by an index-only scan for BM25's N and average length: the agent's rows by
    sample bucket, carrying ``search_len`` and what the visibility filter reads (``include``),
    so neither the exact count of a small agent nor the sample of a large one touches the
    heap — whose rows hold the 1.5 kB embedding (a full scan of 100k facts was most of a
    retrieve's time, ADR-0024)."""
    cols = ", ".join((id_col, *include, "search_len"))
    partial = f" WHERE {where}" if where else ""
    return (f"CREATE INDEX IF NOT EXISTS {table}_bm25_stats ON {table}"
            f" (agent_id, {sample_bucket(id_col)}) INCLUDE ({cols}){partial}")
