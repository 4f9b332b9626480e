"""The LOW-QUALITY offline fallback extractor (EN/PT regexes, no LLM), as a package.

Why a package: the extractor is one idea but four jobs — word lists, regexes, sentence
grammar and the per-sentence decision — each readable on its own. This module only
re-exports the public names so ``engramdb.services.extraction.rule_based`` keeps its API.
"""

from engramdb.services.extraction.rule_based.extractor import (
    OFFLINE_NOTICE,
    RULES_VERSION,
    SELF_FALLBACK,
    RuleBasedExtractor,
)

__all__ = ["OFFLINE_NOTICE", "RULES_VERSION", "SELF_FALLBACK", "RuleBasedExtractor"]
