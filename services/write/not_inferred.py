"""What the write pipeline records for a turn written with ``infer=False`` (ADR-0049).

Why a constant of its own: the turn is stored and processed like any other (its record, the
conversation read model, BM25 and embeddings), but no extractor ran, so the record's
``Processed`` event must say that and not name the deployment's extractor — an audit and an
export read the provenance from there. No LLM call, no decision.
"""

from __future__ import annotations

from engramdb.domain.extraction import STORED_ONLY, Extraction, ExtractorInfo

#: The ``_extract`` tuple of a turn stored without inference: (extraction, error, raw output,
#: LLM calls, extractor info, transient).
NOT_INFERRED: tuple[Extraction, None, None, int, ExtractorInfo, bool] = (
    Extraction(), None, None, 0, ExtractorInfo(extractor=STORED_ONLY), False,
)

