"""What the rule-based extractor gathers from one message while it reads it: the facts,
entities and relations collected so far (``Collected``), what one sentence claims
(``Claim``), and the two steps of a sentence's reading that only add to the collection
(relations between people, the entities a fact mentions)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from engramdb.domain.extraction import (
    ConfidenceLevel,
    ExtractedEntity,
    ExtractedFact,
    ExtractedRelationship,
    KnownEntity,
)
from engramdb.domain.text import fold_case
from engramdb.services.extraction.rule_based.grammar import leading_name
from engramdb.services.extraction.rule_based.known import canonical_name
from engramdb.services.extraction.rule_based.lexicon import RELATIONS
from engramdb.services.extraction.rule_based.patterns import REL_PATTERNS


@dataclass
class Collected:
    facts: list[ExtractedFact] = field(default_factory=list)
    entities: dict[str, ExtractedEntity] = field(default_factory=dict)  # folded name -> entity
    relationships: dict[tuple[str, str, str], ExtractedRelationship] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)  # the clause each fact was read from

    def add(self, fact: ExtractedFact, source: str) -> None:
        self.facts.append(fact)
        self.sources.append(source)

    def entity(self, name: str, entity_type: str) -> str:
        key = fold_case(name)
        if key not in self.entities:
            self.entities[key] = ExtractedEntity(name=name, entity_type=entity_type)
        return self.entities[key].name

    def relate(self, source: str, target: str, relation_type: str) -> None:
        if fold_case(source) == fold_case(target):
            return
        key = (fold_case(source), fold_case(target), relation_type)
        self.relationships.setdefault(
            key, ExtractedRelationship(source=source, target=target, relation_type=relation_type)
        )


@dataclass
class Claim:
    """What one sentence asserts: about whom, which attribute (if any), and whether it is
    new, an UPDATE of a known fact or the RETRACT of one (``target``)."""

    subject: str | None
    attribute: str | None = None
    category: str | None = None
    action: str = "NEW"
    target: str | None = None
    confidence: ConfidenceLevel = ConfidenceLevel.weak_inference
    obj_name: str | None = None
    obj_type: str | None = None
    relation: str | None = None


def relate_people(
    sentence: str, self_name: str, forms: list[tuple[re.Pattern[str], KnownEntity]],
    out: Collected,
) -> bool:
    """Record "my husband Bruno"-style relations of the speaker; True if any was found."""
    related = False
    for rx in REL_PATTERNS:
        for m in rx.finditer(sentence):
            other = leading_name(m.group("name"))
            if other is None or fold_case(other) == fold_case(self_name):
                continue
            rel_type = RELATIONS[m.group("rel").lower()]
            other = out.entity(canonical_name(other, forms), "person")
            out.relate(out.entity(self_name, "person"), other, rel_type)
            related = True
    return related


def mentions_of(
    subject: str,
    obj_name: str | None,
    first_person: bool,
    self_name: str,
    names: list[tuple[str, str, int]],
    forms: list[tuple[re.Pattern[str], KnownEntity]],
    out: Collected,
) -> list[str]:
    """The entities a fact mentions besides its subject: the speaker, named people, the
    object — each once."""
    mentions: list[str] = []
    if first_person and fold_case(subject) != fold_case(self_name):
        mentions.append(out.entity(self_name, "person"))
    for name, entity_type, _ in names:
        canonical = out.entity(canonical_name(name, forms), entity_type)
        if fold_case(canonical) != fold_case(subject) and canonical not in mentions:
            mentions.append(canonical)
    if obj_name and obj_name not in mentions and fold_case(obj_name) != fold_case(subject):
        mentions.append(obj_name)
    return mentions
