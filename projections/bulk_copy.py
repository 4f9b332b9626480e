"""Binary COPY of folded rows into a table, vectors taken from the embedding cache as raw bytes.

Why binary, and why raw vector bytes: the rebuild's load used to COPY text rows into a staging
table and then ``INSERT … SELECT`` them joined to ``mem_embedding_cache`` on a SHA-256 computed
in SQL — every row written twice, every value parsed from text. Here each row is written once,
in PostgreSQL's binary COPY format (psycopg 3 ``cursor.copy`` with ``set_types``), and the
vector of an embedded row is read from the cache in binary and written back byte for byte: no
float ever crosses into Python (pgvector's psycopg adapter would decode to numpy and encode
again for nothing), and the stored vector is bit-identical to the cache's, as the SQL join's.

Vectors are fetched per chunk of rows (``CHUNK``) on a second connection (a connection in COPY
cannot run queries), so memory holds two chunks of vectors, not the whole table's: a thread
fetches the next chunk's while this one is written (the lookups were a third of the load's
time at 100k facts, ADR-0032).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import islice
from typing import Any

import psycopg
from psycopg import Copy, sql
from psycopg.adapt import Dumper, Loader
from psycopg.copy import Writer
from psycopg.pq import Format
from psycopg.types.json import JsonbBinaryDumper

from engramdb.projections.embeddings import text_hash
from engramdb.projections.read_model import fast_dumps
from engramdb.projections.tables import EMBEDDING, Table

CHUNK = 2000  # rows per cache lookup (~3 MB of 384-d vectors)


class RawVector(bytes):
    """A pgvector value in its binary wire form, passed through untouched."""


def register_raw_vectors(conn: psycopg.Connection[Any]) -> None:
    """Make ``vector`` load as ``RawVector`` (binary results) and ``RawVector`` dump as
    ``vector`` (binary COPY) on ``conn``."""
    row = conn.execute("SELECT 'vector'::regtype::oid").fetchone()
    assert row is not None
    oid = int(row[0])

    class _Dumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            return obj  # type: ignore[no-any-return]  # already the wire form: no copy

    class _Loader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> RawVector:
            return RawVector(data)

    _Dumper.oid = oid
    conn.adapters.register_dumper(RawVector, _Dumper)
    conn.adapters.register_loader(oid, _Loader)


_TEXT, _INT4 = 25, 23  # element type oids
_I = struct.Struct("!i")


def _array_header(element_oid: int, n: int) -> bytes:
    if n == 0:
        return struct.pack("!iii", 0, 0, element_oid)
    return struct.pack("!iiiii", 1, 0, element_oid, n, 1)


_EMPTY_TEXT = _array_header(_TEXT, 0)
_ONE_INT4 = struct.Struct("!iiiiiii")  # header of a 1-element int4[], its length, its value
_ONE_TEXT = struct.Struct("!iiiiii")  # header of a 1-element text[] and its length


class JsonbBytes(bytes):
    """A jsonb value already in its binary wire form (version byte + JSON): what psycopg's
    ``Jsonb`` dumper would produce, built by ``jsonb_bytes`` in one call per row instead of
    a wrapper object and two Python dumper layers (the bulk load's ``decided_by``)."""


def jsonb_bytes(value: Any) -> JsonbBytes:
    """``Jsonb(value or {}, dumps=fast_dumps)`` as the binary COPY writes it."""
    data = fast_dumps(value if value is not None else {})
    return JsonbBytes(b"\x01" + (data.encode() if isinstance(data, str) else data))


class _JsonbDumper(JsonbBinaryDumper):
    """jsonb in binary: ``JsonbBytes`` passed through, anything else as psycopg dumps it."""

    def dump(self, obj: Any) -> Any:
        if type(obj) is JsonbBytes:
            return obj
        return super().dump(obj)


class _TextArrayDumper(Dumper):
    """text[] of a flat list of non-NULL strings, in binary (psycopg's generic list dumper is
    pure Python and recursive: ~20% of the load's time on ``mem_facts``' two arrays)."""

    format = Format.BINARY
    oid = 1009

    def dump(self, obj: Any) -> bytes:
        if not obj:
            return _EMPTY_TEXT
        if len(obj) == 1 and type(item := obj[0]) is str:  # most rows: one source message
            data = item.encode()
            return _ONE_TEXT.pack(1, 0, _TEXT, 1, 1, len(data)) + data
        parts = [_array_header(_TEXT, len(obj))]
        for item in obj:
            if item is None:
                raise ValueError("a NULL element in a text[] of a read model: not supported")
            data = str(item).encode()
            parts += (_I.pack(len(data)), data)
        return b"".join(parts)


class _Int4ArrayDumper(Dumper):
    """integer[] of a flat list of non-NULL ints, in binary (as ``_TextArrayDumper``)."""

    format = Format.BINARY
    oid = 1007

    def dump(self, obj: Any) -> bytes:
        n = len(obj)
        if n == 1:  # most facts: one event version
            return _ONE_INT4.pack(1, 0, _INT4, 1, 1, 4, int(obj[0]))
        return _array_header(_INT4, n) + struct.pack(f"!{2 * n}i", *(
            x for item in obj for x in (4, int(item))))


def register_flat_arrays(conn: psycopg.Connection[Any]) -> None:
    """Fast binary dumpers for the flat text[]/integer[] columns of the read models, on
    ``conn`` only (a rebuild's load connection; COPY picks dumpers by column type)."""
    conn.adapters.register_dumper(FlatTextArray, _TextArrayDumper)
    conn.adapters.register_dumper(FlatInt4Array, _Int4ArrayDumper)
    conn.adapters.register_dumper(JsonbBytes, _JsonbDumper)


class FlatTextArray(list):  # type: ignore[type-arg]
    """Marker type the fast text[] dumper is registered under (COPY dispatches by oid)."""


class FlatInt4Array(list):  # type: ignore[type-arg]
    """Marker type the fast integer[] dumper is registered under."""


def column_oids(conn: psycopg.Connection[Any], schema: str, table: str,
                columns: Iterable[str]) -> list[int]:
    """Type oids of ``columns`` of ``schema.table``, in order (what ``copy.set_types`` needs)."""
    cols = list(columns)
    rows = conn.execute(
        "SELECT attname, atttypid FROM pg_attribute WHERE attrelid = %s::regclass "
        "AND attname = ANY(%s) AND NOT attisdropped",
        (sql.Identifier(schema, table).as_string(conn), cols),
    ).fetchall()
    by_name = {str(r[0]): int(r[1]) for r in rows}
    return [by_name[c] for c in cols]


def cached_vectors(cache: psycopg.Connection[Any], model_id: str,
                   hashes: Iterable[str]) -> dict[str, RawVector]:
    """text hash -> raw vector bytes for the hashes the cache holds (model ``model_id``)."""
    wanted = sorted(set(hashes))
    if not wanted:
        return {}
    with cache.cursor(binary=True) as curs:
        curs.execute(
            "SELECT text_hash, embedding FROM mem_embedding_cache "
            "WHERE model_id = %s AND text_hash = ANY(%s)",
            (model_id, wanted),
        )
        return {str(h): v for h, v in curs.fetchall()}


def _chunks(rows: Iterable[tuple[Any, ...]], size: int) -> Iterator[list[tuple[Any, ...]]]:
    it = iter(rows)
    while chunk := list(islice(it, size)):
        yield chunk


class _Blocks(Writer):
    """A COPY ``Writer`` that keeps the formatted data instead of sending it."""

    def __init__(self) -> None:
        self.blocks: list[bytes] = []

    def write(self, data: Any) -> None:
        # the formatter hands over its buffer and starts a new one: kept as is, not copied
        self.blocks.append(data)


def copy_statement(schema: str, table: Table, freeze: bool = False) -> tuple[sql.Composed,
                                                                             list[str]]:
    """The binary ``COPY … FROM STDIN`` of ``table`` and its columns (an embedded table's
    vector last)."""
    columns = list(table.row_columns) + ([EMBEDDING] if table.embedded_text is not None else [])
    statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY{})").format(
        sql.Identifier(schema, table.name),
        sql.SQL(", ").join(sql.Identifier(c) for c in columns),
        sql.SQL(", FREEZE" if freeze else ""),
    )
    return statement, columns


def format_rows(
    conn: psycopg.Connection[Any],
    cache: psycopg.Connection[Any] | None,
    table: Table,
    oids: list[int],
    rows: Iterable[tuple[Any, ...]],
    model_id: str,
    missing: list[str] | None = None,
) -> tuple[list[bytes], int]:
    """``rows`` in PostgreSQL's binary COPY format (signature and trailer included), with
    ``conn``'s dumpers but without using ``conn`` (it may be in a COPY on another thread):
    the blocks ``send_blocks`` writes. An embedded table's rows get their cached vector (NULL
    if the cache lacks it, as the SQL join gave), looked up on ``cache``; the texts it lacked
    are appended to ``missing`` if given (a fold worker asks for them, ADR-0039). Returns the
    blocks and the number of rows."""
    writer = _Blocks()
    count = 0
    with Copy(conn.cursor(), binary=True, writer=writer) as copy:
        copy.set_types(oids)
        if table.embedded_text is None:
            for row in rows:
                copy.write_row(row)
                count += 1
        else:
            assert cache is not None
            count = _write_embedded(copy, cache, table, rows, model_id, missing)
    return writer.blocks, count


def send_blocks(conn: psycopg.Connection[Any], statement: sql.Composed,
                blocks: Iterable[bytes]) -> None:
    """COPY pre-formatted binary blocks (``format_rows``): no Python per row, so a thread
    sending them holds the GIL only between socket writes."""
    with conn.cursor() as curs, curs.copy(statement) as copy:
        for block in blocks:
            copy.write(block)


def _write_embedded(copy: Any, cache: psycopg.Connection[Any], table: Table,
                    rows: Iterable[tuple[Any, ...]], model_id: str,
                    missing: list[str] | None = None) -> int:
    """Write ``rows`` with their cached vectors, chunk by chunk."""
    count = 0
    text_of = table.python_embedded_text

    def hashed(chunk: list[tuple[Any, ...]]) -> tuple[list[tuple[Any, ...]], list[str]]:
        return chunk, [text_hash(text_of(row)) for row in chunk]

    # the next chunk's vectors are fetched by a thread while this one is written: the
    # lookup waits on the cache connection's socket (GIL released), the COPY on its own
    with ThreadPoolExecutor(1, thread_name_prefix="rebuild-vectors") as pool:
        chunks = map(hashed, _chunks(rows, CHUNK))
        pending = None
        for chunk, hashes in chunks:
            ahead = pool.submit(cached_vectors, cache, model_id, hashes)
            if pending is not None:
                count += _write_chunk(copy, *pending, text_of, missing)
            pending = (chunk, hashes, ahead)
        if pending is not None:
            count += _write_chunk(copy, *pending, text_of, missing)
    return count


def _write_chunk(copy: Any, chunk: list[tuple[Any, ...]], hashes: list[str],
                 vectors: Future[dict[str, RawVector]], text_of: Any = None,
                 missing: list[str] | None = None) -> int:
    found = vectors.result()
    if missing is not None and len(found) < len(set(hashes)):
        missing.extend(text_of(row) for row, h in zip(chunk, hashes, strict=True)
                       if h not in found)
    for row, h in zip(chunk, hashes, strict=True):
        copy.write_row((*row, found.get(h)))
    return len(chunk)
