"""engramdb — event-sourced long-term memory for LLM agents.

This module is the public API: everything a user needs to open a memory, write messages,
retrieve context and plug in providers. The layers live in subpackages
(``engramdb.domain``, ``engramdb.projections``, ``engramdb.services``, ``engramdb.infra``);
names not exported here may change between releases.

Imports are lazy (PEP 562) so that ``import engramdb.domain`` stays free of the service
layer's dependencies (FastAPI, NATS, the database drivers); type checkers see the real names.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAYERS = ("domain", "projections", "services", "infra")


def _check_layer_links() -> None:
    """In a checkout the layers are symlinks (ADR-0007). Git without symlink support (Windows
    without ``core.symlinks``) writes each link as a small text file instead, and every import
    below would fail with an unexplained ``ModuleNotFoundError``: say what is wrong at once."""
    here = Path(__file__).resolve().parent
    plain = [layer for layer in _LAYERS if (here / layer).is_file()]
    if plain:
        raise ImportError(
            f"engramdb/{plain[0]} is a plain file, not a link to ../{plain[0]}: this checkout "
            "was made without symlinks; run `git config core.symlinks true && git checkout -- "
            "engramdb` (on Windows, enable Developer Mode first) and reinstall"
        )


_check_layer_links()

# public name -> module that defines it (one place; tests/integration/test_packaging.py pins it)
_EXPORTS: dict[str, str] = {
    "Memory": "engramdb.services.memory.facade",
    "AsyncMemory": "engramdb.services.memory.async_facade",
    "Settings": "engramdb.infra.settings",
    "ConversationMessage": "engramdb.services.write.messages",
    "InvalidMessage": "engramdb.services.write.messages",
    "WriteResult": "engramdb.services.write.models",
    "RetrieveResult": "engramdb.services.retrieve.models",
    "RetrieveConfig": "engramdb.services.retrieve.config",
    "UnknownConfigKey": "engramdb.services.retrieve.config",
    "LLMProvider": "engramdb.domain.ports",
    "EmbeddingProvider": "engramdb.domain.ports",
    "Extractor": "engramdb.services.extraction.port",
    "DecisionRejected": "engramdb.domain.errors",
    "EmbeddingModelMismatch": "engramdb.projections.read_model",
    "ProviderError": "engramdb.infra.providers.errors",
    "ProviderTimeout": "engramdb.infra.providers.errors",
    "ProviderRateLimited": "engramdb.infra.providers.errors",
    "ProviderBadResponse": "engramdb.infra.providers.errors",
    "ProviderUnavailable": "engramdb.infra.providers.errors",
    "RerankFailed": "engramdb.services.retrieve.rerank",
    "EmbeddedServerError": "engramdb.infra.embedded_base",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from engramdb.domain.errors import DecisionRejected as DecisionRejected
    from engramdb.domain.ports import EmbeddingProvider as EmbeddingProvider
    from engramdb.domain.ports import LLMProvider as LLMProvider
    from engramdb.infra.embedded_base import EmbeddedServerError as EmbeddedServerError
    from engramdb.infra.providers.errors import ProviderBadResponse as ProviderBadResponse
    from engramdb.infra.providers.errors import ProviderError as ProviderError
    from engramdb.infra.providers.errors import ProviderRateLimited as ProviderRateLimited
    from engramdb.infra.providers.errors import ProviderTimeout as ProviderTimeout
    from engramdb.infra.providers.errors import ProviderUnavailable as ProviderUnavailable
    from engramdb.infra.settings import Settings as Settings
    from engramdb.projections.read_model import EmbeddingModelMismatch as EmbeddingModelMismatch
    from engramdb.services.extraction.port import Extractor as Extractor
    from engramdb.services.memory.async_facade import AsyncMemory as AsyncMemory
    from engramdb.services.memory.facade import Memory as Memory
    from engramdb.services.retrieve.config import RetrieveConfig as RetrieveConfig
    from engramdb.services.retrieve.config import UnknownConfigKey as UnknownConfigKey
    from engramdb.services.retrieve.models import RetrieveResult as RetrieveResult
    from engramdb.services.retrieve.rerank import RerankFailed as RerankFailed
    from engramdb.services.write.messages import ConversationMessage as ConversationMessage
    from engramdb.services.write.messages import InvalidMessage as InvalidMessage
    from engramdb.services.write.models import WriteResult as WriteResult


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'engramdb' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # resolve once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
