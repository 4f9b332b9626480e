"""What memory already knows, as the rule-based extractor uses it: known entities' surface
forms (display names and aliases), their canonical names and types, and the known fact a
single-valued attribute statement would UPDATE or RETRACT.

Why its own module: these look-ups depend only on the :class:`ExtractionInput`'s known
entities and facts, never on the sentence being read — the memory side of the extractor,
kept apart from its sentence side in :mod:`.extractor`.
"""

from __future__ import annotations

import re

from engramdb.domain.extraction import ExtractionInput, KnownEntity, KnownFact
from engramdb.domain.text import fold_case
from engramdb.services.extraction.rule_based.grammar import slug
from engramdb.services.extraction.rule_based.lexicon import SINGLE_VALUED


def known_forms(entities: list[KnownEntity]) -> list[tuple[re.Pattern[str], KnownEntity]]:
    """Surface forms of known entities, longest first, as word-bounded regexes."""
    pairs: list[tuple[str, KnownEntity]] = []
    for ent in entities:
        for form in [ent.display_name, *ent.aliases]:
            if len(form.strip()) >= 3:
                pairs.append((form.strip(), ent))
    pairs.sort(key=lambda p: (-len(p[0]), p[0]))
    return [
        (re.compile(rf"(?<!\w){re.escape(form)}(?!\w)", re.IGNORECASE), ent) for form, ent in pairs
    ]


def canonical_name(name: str, forms: list[tuple[re.Pattern[str], KnownEntity]]) -> str:
    for regex, ent in forms:
        if regex.fullmatch(name):
            return ent.display_name
    return name


def known_type(name: str, forms: list[tuple[re.Pattern[str], KnownEntity]]) -> str | None:
    for regex, ent in forms:
        if regex.fullmatch(name):
            return ent.entity_type
    return None


def keys_of(request: ExtractionInput, name: str) -> list[str]:
    """Entity keys a name may stand for: known entities it names, and its slug."""
    folded = fold_case(name)
    keys = [
        ent.entity_key
        for ent in request.known_entities
        if folded in {fold_case(ent.display_name), *(fold_case(a) for a in ent.aliases)}
    ]
    name_slug = slug(name)
    for fact in request.known_facts:
        if fact.entity_key.split(":", 1)[-1] == name_slug and fact.entity_key not in keys:
            keys.append(fact.entity_key)
    return keys


def known_attribute_fact(request: ExtractionInput, name: str, attribute: str) -> KnownFact | None:
    if attribute not in SINGLE_VALUED:
        return None
    keys = keys_of(request, name)
    for fact in request.known_facts:
        if fact.attribute_key == attribute and fact.entity_key in keys:
            return fact
    return None
