"""``EmbeddingProvider`` over an OpenAI-compatible ``/v1/embeddings`` endpoint.

Vectors are re-normalised to unit length here: OpenAI's already are, but local servers do
not all normalise, and the stores compare by cosine / inner product.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import openai

from engramdb.infra.providers.calibration import similarity_floor
from engramdb.infra.providers.errors import ProviderBadResponse, call_with_retries
from engramdb.infra.providers.openai_llm import NO_KEY

#: Native output sizes of the well-known OpenAI models, so that no probe call is needed.
KNOWN_DIMENSIONS: dict[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}


def _normalise(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:
        return [float(x) for x in vector]
    return [float(x) / norm for x in vector]


class OpenAIEmbeddings:
    """Embeddings from an OpenAI-compatible endpoint; queries and passages alike.

    ``dimensions``: when given it is sent to the API (text-embedding-3 models can shorten
    their output) and becomes part of ``model_id`` (``openai:<model>:<dims>``), because
    shortened vectors differ from full ones. When not given, the size comes from
    ``KNOWN_DIMENSIONS`` or, for an unknown model, from one probe call at construction.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        dimensions: int | None = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        batch_size: int = 256,
        sleep: Callable[[float], None] = time.sleep,
        client: openai.OpenAI | None = None,
    ) -> None:
        self.model = model
        self._request_dimensions = dimensions
        self.model_id = f"openai:{model}" if dimensions is None else f"openai:{model}:{dimensions}"
        self.similarity_floor = similarity_floor(self.model_id)
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.batch_size = batch_size
        self._sleep = sleep
        self._client = client or openai.OpenAI(
            api_key=api_key or NO_KEY, base_url=base_url or None, timeout=timeout, max_retries=0
        )
        if dimensions is not None:
            self.dimensions = dimensions
        elif model in KNOWN_DIMENSIONS:
            self.dimensions = KNOWN_DIMENSIONS[model]
        else:
            self.dimensions = len(self._embed_batch(["dimension probe"])[0])

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        kwargs: dict[str, Any] = {"model": self.model, "input": texts}
        if self._request_dimensions is not None:
            kwargs["dimensions"] = self._request_dimensions
        response = call_with_retries(
            lambda: self._client.embeddings.create(**kwargs),
            what=f"{self.model_id} embeddings",
            max_retries=self.max_retries,
            backoff_base=self.backoff_base,
            backoff_max=self.backoff_max,
            sleep=self._sleep,
        )
        data = sorted(response.data, key=lambda item: item.index)
        if len(data) != len(texts):
            raise ProviderBadResponse(
                f"{self.model_id}: asked for {len(texts)} vectors, got {len(data)}"
            )
        return [_normalise(item.embedding) for item in data]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        items = list(texts)
        out: list[list[float]] = []
        for start in range(0, len(items), self.batch_size):
            out.extend(self._embed_batch(items[start : start + self.batch_size]))
        return out

    def embed_query(self, text: str) -> list[float]:
        return self._embed_batch([text])[0]
