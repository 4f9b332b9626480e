"""Procedural directives: how the agent should behave for this person (issue 26).

"Answer in Portuguese", "keep answers short", "never suggest meetings before 9 am". A
directive is stored as a **fact of category** ``directive`` about the speaker, with the
attribute key ``directive:<topic>`` (ADR-0045). Why not a new aggregate or event type: a
fact already has everything the issue asks of a directive — events, versions
(supersession), retraction, as-of, history, provenance, erasure, every listing surface —
and a single-valued attribute key is exactly "a correction on the same topic supersedes
it" ("actually, long answers are fine" replaces "keep answers short"). The category keeps
them apart where it matters: the context's own "Directives" section and the list filter.

The extractor proposes :class:`ExtractedDirective` items;
``domain.directive_facts.with_directive_facts`` turns them into ordinary extracted facts
before resolution, so reconciliation stays one code path.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

DIRECTIVE_CATEGORY = "directive"
ATTRIBUTE_PREFIX = "directive:"
_TOPIC = re.compile(r"[^a-z0-9]+")


class ExtractedDirective(BaseModel):
    """One behavioural instruction to the agent. ``text``: an imperative sentence (in
    English on the LLM path; the user's own words on the offline path). ``topic``: a short
    snake_case name of what it governs (language, answer_length, meeting_times, tone, …):
    a later directive on the same topic supersedes it."""

    text: str = Field(min_length=1, max_length=500)
    topic: str = Field(min_length=1, max_length=60)


def topic_key(topic: str) -> str:
    """``directive:<topic>`` with the topic folded to snake_case (never empty)."""
    slug = _TOPIC.sub("_", topic.strip().lower()).strip("_")[:48] or "general"
    return ATTRIBUTE_PREFIX + slug


def is_directive(category: str | None) -> bool:
    return category == DIRECTIVE_CATEGORY
