"""Raw-turn baselines for the LoCoMo retrieval benchmark: BM25, dense, and their RRF fusion.

Why baselines at all: a memory system earns its complexity only if it retrieves the
evidence better than indexing the raw conversation would. The baselines index each turn
as ``[session date] speaker: text`` (one unit = one turn) of *one* conversation, exactly
what engramdb sees for that agent, and rank all of them for every question.

* BM25 — ``bm25s`` (Lucene variant, k1 1.5, b 0.75), English stop words, Snowball
  English stemming (``PyStemmer``; without it BM25 loses ~3.5 points of Recall@10 on the
  dev set, so the stemmer in use is reported with the results).
* Dense — the embedder engramdb itself uses (``embed`` for turns, ``embed_query`` for the
  question), cosine similarity. Each turn is embedded once per run.
* Hybrid — reciprocal-rank fusion of the two full rankings, ``Σ 1 / (k + rank)``, k = 60.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

import bm25s
import numpy as np

from engramdb.domain.ports import EmbeddingProvider

RRF_K = 60
Ranking = list[str]  # dia_ids, best first


@lru_cache(maxsize=1)
def stemmer() -> Callable[[list[str]], list[str]] | None:
    """Snowball English stemmer when ``PyStemmer`` is installed, else ``None``."""
    try:
        import Stemmer
    except ImportError:
        return None
    stem: Callable[[list[str]], list[str]] = Stemmer.Stemmer("english").stemWords
    return stem


def stemmer_name() -> str:
    return "snowball-english" if stemmer() else "none"


def _tokenize(texts: list[str]) -> list[list[str]]:
    return bm25s.tokenize(  # type: ignore[return-value]
        texts, stopwords="en", stemmer=stemmer(), return_ids=False, show_progress=False
    )


class BM25Index:
    """BM25 over one conversation's turns; ``rank`` returns every turn id, best first."""

    def __init__(self, ids: Sequence[str], texts: Sequence[str]) -> None:
        self.ids = list(ids)
        self._retriever = bm25s.BM25(k1=1.5, b=0.75)
        self._retriever.index(
            bm25s.tokenize(list(texts), stopwords="en", stemmer=stemmer(), show_progress=False),
            show_progress=False,
        )

    def scores(self, query: str) -> np.ndarray:
        tokens = _tokenize([query])[0]
        if not tokens:
            return np.zeros(len(self.ids), dtype=np.float32)
        return np.asarray(self._retriever.get_scores(tokens), dtype=np.float32)

    def rank(self, query: str) -> Ranking:
        return rank_by_scores(self.ids, self.scores(query))


class DenseIndex:
    """Cosine similarity over unit vectors (the embedders return unit length; we re-normalise
    anyway so a provider that does not still ranks by cosine)."""

    def __init__(self, ids: Sequence[str], vectors: Sequence[Sequence[float]] | np.ndarray) -> None:
        self.ids = list(ids)
        matrix = np.asarray(vectors, dtype=np.float32).reshape(len(self.ids), -1)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        self.matrix = matrix / norms

    @classmethod
    def build(
        cls, ids: Sequence[str], texts: Sequence[str], embedder: EmbeddingProvider
    ) -> DenseIndex:
        return cls(ids, embedder.embed(list(texts)))

    def scores(self, query_vector: Sequence[float]) -> np.ndarray:
        q = np.asarray(query_vector, dtype=np.float32)
        norm = float(np.linalg.norm(q)) or 1.0
        return np.asarray(self.matrix @ (q / norm), dtype=np.float32)

    def rank(self, query_vector: Sequence[float]) -> Ranking:
        return rank_by_scores(self.ids, self.scores(query_vector))


def rank_by_scores(ids: Sequence[str], scores: np.ndarray) -> Ranking:
    """Highest score first; ties keep document order (stable), so runs are deterministic."""
    order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
    return [ids[i] for i in order]


def rrf(rankings: Sequence[Sequence[str]], k: int = RRF_K) -> Ranking:
    """Reciprocal-rank fusion: ``score(d) = Σ_r 1 / (k + rank_r(d))``, ranks from 1.

    An item missing from a ranking contributes nothing for it. Ties are broken by the
    best single rank, then by first appearance, so the fusion is deterministic.
    """
    score: dict[str, float] = {}
    best: dict[str, int] = {}
    first_seen: dict[str, int] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            score[item] = score.get(item, 0.0) + 1.0 / (k + rank)
            best[item] = min(best.get(item, rank), rank)
            first_seen.setdefault(item, len(first_seen))
    return sorted(score, key=lambda d: (-score[d], best[d], first_seen[d]))
