"""Directives into facts (ADR-0045): the extractor's ``directives`` become ordinary facts of
category ``directive`` about the speaker before resolution, so resolution, reconciliation
(same topic → UPDATE), retraction, as-of and history need no second code path."""

from __future__ import annotations

from engramdb.domain.directives import DIRECTIVE_CATEGORY, ExtractedDirective, topic_key
from engramdb.domain.extraction import ConfidenceLevel, ExtractedEntity, ExtractedFact, Extraction
from engramdb.domain.text import match_key as fold


def directive_fact(directive: ExtractedDirective, speaker: str | None) -> ExtractedFact:
    """The fact a directive is stored as: about the speaker (``user`` if unknown)."""
    return ExtractedFact(
        text=directive.text.strip(),
        entity=(speaker or "").strip() or "user",
        attribute_key=topic_key(directive.topic),
        category=DIRECTIVE_CATEGORY,
        confidence_level=ConfidenceLevel.explicit_statement,
    )


def with_directive_facts(extraction: Extraction, speaker: str | None) -> Extraction:
    """``extraction`` with one fact per directive appended (after its own facts, so the
    fact cap never drops a message's facts for them) and the speaker listed as an entity.
    A directive whose text is already a fact of the extraction is not added twice."""
    if not extraction.directives:
        return extraction
    seen = {fold(f.text) for f in extraction.facts}
    extra: list[ExtractedFact] = []
    for directive in extraction.directives:
        fact = directive_fact(directive, speaker)
        if fold(fact.text) in seen:
            continue
        seen.add(fold(fact.text))
        extra.append(fact)
    if not extra:
        return extraction
    entities = list(extraction.entities)
    subject = extra[0].entity
    if all(fold(e.name) != fold(subject) for e in entities):
        entities.append(ExtractedEntity(name=subject, entity_type="person"))
    return extraction.model_copy(update={"facts": [*extraction.facts, *extra], "entities": entities})
