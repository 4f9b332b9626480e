"""``CountingHashEmbedder``: the honest hash embedder, counting how many texts reach it
(shared by the port contracts and the LoCoMo harness's memo tests)."""

from __future__ import annotations

from typing import Any

from engramdb.infra.providers.scripted import HashEmbedder


class CountingHashEmbedder(HashEmbedder):
    """The honest hash embedder, counting how many texts reach it."""

    def __init__(self) -> None:
        super().__init__(384)
        self.passages = 0
        self.queries = 0

    def embed(self, texts: Any) -> list[list[float]]:
        self.passages += len(list(texts))
        return super().embed(texts)

    def embed_query(self, text: str) -> list[float]:
        self.queries += 1
        return super().embed_query(text)
