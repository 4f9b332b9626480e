"""The extractor port: what an extraction attempt returns and the protocol every extractor meets.

Why its own module: the implementations (LLM, rule-based) and the package's re-exports all
depend on these two names; keeping them apart from ``__init__`` lets imports go one way
(implementations -> port), with no import cycle through the package.
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
    that call no LLM, or when the call itself failed). ``transient`` says the failure was an
    outage (unreachable, timeout, 429, 5xx), not a bad answer: the write pipeline then
    defers the extraction instead of recording an empty one (ADR-0014).
    """

    extraction: Extraction = field(default_factory=Extraction)
    llm_calls: int = 0
    error: str | None = None
    raw_output: str | None = None
    duration_ms: float = 0.0
    transient: bool = False


@runtime_checkable
class Extractor(Protocol):
    """Structural interface of every extractor; injected into the write pipeline."""

    info: ExtractorInfo

    def extract(self, request: ExtractionInput) -> ExtractionOutcome: ...
