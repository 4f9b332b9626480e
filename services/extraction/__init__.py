"""Extractors: turn one message (plus what memory already knows) into proposed facts.

docs/spec.md §2 step 3. An extractor *proposes*; entity resolution and reconciliation in the
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

from engramdb.services.extraction.llm_extractor import (
    DEFAULT_PROMPT_VERSION,
    LLMExtractor,
    extraction_json_schema,
    load_prompt,
)
from engramdb.services.extraction.port import ExtractionOutcome, Extractor
from engramdb.services.extraction.rule_based import OFFLINE_NOTICE, RuleBasedExtractor

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
