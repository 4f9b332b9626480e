"""Structural interfaces of the outside world that the domain and the services need.

They live in ``domain`` so that every layer can depend on them without depending on
``infra``: providers are injected by structural typing (docs/spec.md §5), no base class needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class LLMProvider(Protocol):
    """A chat-completion model. ``messages`` are OpenAI-style ``{"role", "content"}`` dicts.

    ``response_format`` is passed through as the OpenAI ``response_format`` argument (for
    example a ``{"type": "json_schema", ...}`` dict). Returns the assistant's text.
    """

    name: str

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        temperature: float = 0,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> str: ...


@runtime_checkable
class EmbeddingProvider(Protocol):
    """A text embedding model.

    ``model_id`` names the model *and* its variant/normalisation, because vectors are cached
    per (model_id, text): two providers with the same ``model_id`` must give the same vectors.
    ``embed`` embeds passages (facts, messages); ``embed_query`` embeds a search query
    (e5-style models distinguish the two).

    ``similarity_floor`` is the model's noise level: the raw cosine of unrelated query/passage
    pairs (multilingual e5 ~0.75, MiniLM ~0.1). It belongs to the model, not to retrieval,
    because a similarity threshold only means the same thing across models once cosine is
    rescaled so that this floor is 0 (ADR 0003). Use 0.0 for a model never measured.
    """

    model_id: str
    dimensions: int
    similarity_floor: float

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    def embed_query(self, text: str) -> list[float]: ...
