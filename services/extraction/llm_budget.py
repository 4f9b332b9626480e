"""Output bounds (``max_tokens``) of every LLM call engramdb makes, sized from its answer schema.

Why: an unbounded call can run away. With a real 1.5B model the extraction call produced
3,122 output tokens on some turns (~210 s each) before the timeout abandoned it — and the
provider's retry then paid it again. A bound sized from what a *valid* answer can hold
stops a runaway early; an answer cut at the bound is invalid JSON (or the provider reports
``finish_reason == "length"``), which every caller already handles fail-safe: extraction
records the message, the raw output and the error and stores no facts; the reranker keeps
the formula ranking; entity resolution makes a new entity.

The arithmetic, in tokens (``approx_tokens``: ~4 characters per token; JSON punctuation and
the keys of a strict-mode schema cost more per character, hence the generous item sizes,
which also leave room for a model that pretty-prints):

* **extraction** — ``ENVELOPE`` (64: ``{"facts": [], "entities": [], "relationships": []}``
  and whitespace) + ``facts × PER_FACT``, where ``PER_FACT`` = 120 for one fact object
  (every field is required in strict mode: ~45 tokens of keys, quotes and enum values, and
  a self-contained fact text of up to ~60 tokens) + 2 × 20 for the entities it may
  introduce (``{"name": …, "entity_type": …}``) + 30 for one relationship = **190**.
  ``facts`` is the message's fact cap: at most ``max_facts``, and at most what a message of
  its size can state — ``2 + message_tokens // 5`` (an atomic fact restates at least ~5
  tokens of the message: "I live in Lisbon"; the 2 cover short dense turns such as "I'm 34,
  married"). The prompt tells the model the same cap. A 25-token turn: 7 facts → 1,394.
* **rerank** — ``{"scores": {"1": 0.85, …}}``: 32 + 12 per item (``"12": 0.85,`` is ~7
  tokens; 12 leaves room for spaces and newlines). 30 items → 392.
* **entity resolution** — ``{"match": "<candidate key>"}`` or ``{"match": null}``: 24 for
  the envelope + the longest candidate key at 2 characters per token (keys are slugs, which
  tokenise badly), never under the former fixed bound of 60.
"""

from __future__ import annotations

from collections.abc import Sequence

from engramdb.domain.text import approx_tokens

EXTRACTION_ENVELOPE_TOKENS = 64
FACT_TOKENS = 120
ENTITY_TOKENS = 20
RELATIONSHIP_TOKENS = 30
PER_FACT_TOKENS = FACT_TOKENS + 2 * ENTITY_TOKENS + RELATIONSHIP_TOKENS  # 190
MESSAGE_TOKENS_PER_FACT = 5
MIN_FACTS = 2

RERANK_ENVELOPE_TOKENS = 32
RERANK_ITEM_TOKENS = 12

RESOLUTION_ENVELOPE_TOKENS = 24
RESOLUTION_MIN_TOKENS = 60


def extraction_fact_cap(message: str, max_facts: int) -> int:
    """How many facts one message may yield: ``max_facts``, or fewer for a short message."""
    by_size = MIN_FACTS + approx_tokens(message) // MESSAGE_TOKENS_PER_FACT
    return max(0, min(max_facts, by_size))


# Issue 26 (extraction/v3): the same answer carries the message's emotion
# (``{"primary": "joy", "intensity": "high"}``, ~16 tokens with its key) and up to a couple
# of directives (an English imperative sentence + a topic slug, ~50 tokens each).
EMOTION_TOKENS = 24
DIRECTIVE_TOKENS = 50
DIRECTIVES_BUDGETED = 2


def extraction_max_tokens(fact_cap: int) -> int:
    """Output bound of the extraction call for a message capped at ``fact_cap`` facts."""
    return (EXTRACTION_ENVELOPE_TOKENS + EMOTION_TOKENS + DIRECTIVES_BUDGETED * DIRECTIVE_TOKENS
            + max(fact_cap, 1) * PER_FACT_TOKENS)


def rerank_max_tokens(n_items: int) -> int:
    """Output bound of the reranker call that scores ``n_items`` items."""
    return RERANK_ENVELOPE_TOKENS + max(n_items, 1) * RERANK_ITEM_TOKENS


def resolution_max_tokens(candidate_keys: Sequence[str]) -> int:
    """Output bound of the entity-resolution call choosing among ``candidate_keys``."""
    longest = max((len(k) for k in candidate_keys), default=0)
    return max(RESOLUTION_MIN_TOKENS, RESOLUTION_ENVELOPE_TOKENS + -(-longest // 2))


# * **profile** (ADR-0022) — a plain-text English profile of one entity, 2–4 sentences, at
#   most ``PROFILE_MAX_CHARS`` (600) characters: 600 / 4 = 150 tokens + 50 for a model that
#   adds a heading or a newline. An answer cut at the bound is kept only up to its last
#   full sentence.
PROFILE_MAX_CHARS = 600
PROFILE_TOKENS = 200


def profile_max_tokens() -> int:
    """Output bound of the profile-refresh call (one entity)."""
    return PROFILE_TOKENS


# * **consolidation** (ADR-0030) — the consolidation job's LLM reviewer answers JSON with at
#   most ``CONSOLIDATION_MAX_PATTERNS`` (5) patterns: each a sentence of at most 200
#   characters (50 tokens) plus kind, evidence numbers and confidence (~30 tokens); 40 for
#   the envelope. A cut answer is not used (``ProviderTruncated``); nothing is recorded and
#   the next run asks again.
CONSOLIDATION_MAX_PATTERNS = 5
CONSOLIDATION_PATTERN_TOKENS = 80
CONSOLIDATION_ENVELOPE_TOKENS = 40


def consolidation_max_tokens() -> int:
    """Output bound of the consolidation reviewer's call (one agent)."""
    return CONSOLIDATION_ENVELOPE_TOKENS + CONSOLIDATION_MAX_PATTERNS * CONSOLIDATION_PATTERN_TOKENS
