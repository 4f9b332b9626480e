"""Extractors: turn one message (plus what memory already knows) into proposed facts.

SPEC §2 step 3. An extractor *proposes*; entity resolution and reconciliation in the
domain *decide*. Extractors are fail-safe: whatever goes wrong (timeout, provider error,
malformed JSON) they return an empty :class:`Extraction` plus an error text, never raise,
because memory must never crash the caller's main flow. The raw LLM output is returned
too, so the write pipeline can record it in an event and no model output is ever lost.

Two implementations share the structural :class:`Extractor` protocol:

* :class:`LLMExtractor` — the real one (one JSON-schema-constrained LLM call per message);
* :class:`RuleBasedExtractor` — a deliberately low-quality, deterministic, offline
  fallback used when no LLM is configured (services print :data:`OFFLINE_NOTICE`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from engramdb.domain.extraction import Extraction, ExtractionInput, ExtractorInfo


@dataclass(frozen=True)
class ExtractionOutcome:
    """What one extraction attempt produced.

    ``error`` is ``None`` only when the extractor's output was used in full; a partial
    result (some facts dropped as invalid, or capped) keeps the valid facts *and* says
    what was dropped. ``raw_output`` is the LLM's text verbatim (``None`` for extractors
    that call no LLM, or when the call itself failed).
    """

    extraction: Extraction = field(default_factory=Extraction)
    llm_calls: int = 0
    error: str | None = None
    raw_output: str | None = None
    duration_ms: float = 0.0


@runtime_checkable
class Extractor(Protocol):
    """Structural interface of every extractor; injected into the write pipeline."""

    info: ExtractorInfo

    def extract(self, request: ExtractionInput) -> ExtractionOutcome: ...


# Imported after the definitions above: the submodules import them from this package.
from engramdb.services.extraction.llm_extractor import (  # noqa: E402
    DEFAULT_PROMPT_VERSION,
    LLMExtractor,
    extraction_json_schema,
    load_prompt,
)
from engramdb.services.extraction.rule_based import OFFLINE_NOTICE, RuleBasedExtractor  # noqa: E402

__all__ = [
    "DEFAULT_PROMPT_VERSION",
    "OFFLINE_NOTICE",
    "ExtractionOutcome",
    "Extractor",
    "LLMExtractor",
    "RuleBasedExtractor",
    "extraction_json_schema",
    "load_prompt",
]
