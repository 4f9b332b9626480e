"""Which LLM each operation of a ``Memory`` uses, and the extractor that follows (ADR-0052).

``Memory.open`` asks here: ``llm`` left out = the settings' per-operation providers
(``ENGRAMDB_LLM_<OP>_*``, falling back to ``ENGRAMDB_LLM_*``); ``llm=p`` (a test's scripted
provider, or ``None`` for offline) = ``p`` for every operation, as before operations had
models of their own; ``llms={"rerank": q, ...}`` replaces some operations on top of either.
Every provider is wrapped once in the error counter of ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engramdb.domain.ports import LLMProvider
from engramdb.infra.providers.factory import make_operation_llms
from engramdb.infra.providers.operations import OperationLLMs
from engramdb.infra.settings import Settings
from engramdb.services.extraction import Extractor, LLMExtractor, RuleBasedExtractor
from engramdb.services.observability.metrics import Metrics


def choose_llms(settings: Settings, llm: Any, unset: Any,
                llms: Mapping[str, LLMProvider | None] | None, metrics: Metrics) -> OperationLLMs:
    chosen = make_operation_llms(settings) if llm is unset else OperationLLMs.same(llm)
    if llms:
        chosen = chosen.with_overrides(llms)
    return chosen.wrapped(lambda p: metrics.count_llm_errors(p) or p)


def choose_extractor(settings: Settings, llms: OperationLLMs) -> Extractor:
    """The LLM extractor on the extraction operation's provider and timeout; the rule-based
    one when extraction has no LLM."""
    provider = llms.get("extraction")
    if provider is None:
        return RuleBasedExtractor()
    return LLMExtractor(provider, timeout_sec=llms.timeout_sec("extraction", settings.llm_timeout_sec))


class LLMsMixin:
    """``Memory.llms`` (each operation's provider) and ``Memory.llm``, the extraction one."""

    llms: OperationLLMs

    @property
    def llm(self) -> LLMProvider | None:
        """The extraction operation's provider (``None``: offline extraction)."""
        return self.llms.get("extraction")

    @llm.setter
    def llm(self, provider: LLMProvider | None) -> None:
        """One provider for every operation from now on (the jobs read it at each run; the
        write pipeline and the retriever keep what they were built with)."""
        self.llms = OperationLLMs.same(provider)
