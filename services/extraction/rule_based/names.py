"""Who a sentence names: known entities' surface forms and capitalised words, typed.

Why its own module: finding names (and guessing person/place/organization from the word
before them) depends only on the sentence and the known entities, not on the extraction's
state; :mod:`.extractor` asks it once per clause.
"""

from __future__ import annotations

import re

from engramdb.domain.extraction import KnownEntity
from engramdb.domain.text import STOPWORDS_EXTRACTION, fold_case
from engramdb.services.extraction.rule_based.grammar import strip_possessive
from engramdb.services.extraction.rule_based.lexicon import CONNECTORS, NAME_FOLLOWERS
from engramdb.services.extraction.rule_based.patterns import NAME


def names_in(
    sentence: str,
    self_name: str,
    forms: list[tuple[re.Pattern[str], KnownEntity]],
) -> list[tuple[str, str, int]]:
    """(name, entity_type, position) of entities in the sentence, in order of appearance."""
    found: list[tuple[str, str, int]] = []
    taken: list[tuple[int, int]] = []

    def free(start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e in taken)

    for regex, ent in forms:
        for m in regex.finditer(sentence):
            if free(m.start(), m.end()):
                taken.append((m.start(), m.end()))
                found.append((ent.display_name, ent.entity_type, m.start()))
    for m in re.finditer(NAME, sentence):
        tokens = list(re.finditer(r"\S+", m.group(0)))
        # Drop stopword tokens at the edges ("My", "The", trailing "I").
        while tokens and strip_possessive(tokens[0].group(0)).lower() in STOPWORDS_EXTRACTION:
            tokens.pop(0)
        while (
            len(tokens) > 1
            and strip_possessive(tokens[-1].group(0)).lower() in STOPWORDS_EXTRACTION
            and tokens[-2].group(0).lower() not in CONNECTORS
        ) or (
            len(tokens) == 1
            and strip_possessive(tokens[0].group(0)).lower() in STOPWORDS_EXTRACTION
        ):
            tokens.pop()
        if not tokens:
            continue
        start = m.start() + tokens[0].start()
        end = m.start() + tokens[-1].end()
        name = strip_possessive(sentence[start:end])
        if not free(start, end) or fold_case(name) == fold_case(self_name):
            continue
        if start == 0 and not initial_is_name(sentence, name, end):
            continue
        entity_type = guess_type(sentence, start)
        taken.append((start, end))
        found.append((name, entity_type, start))
    found.sort(key=lambda item: item[2])
    return found


def initial_is_name(sentence: str, name: str, end: int) -> bool:
    """A sentence-initial capitalised word is a name only with some evidence."""
    if " " in name:
        return True  # multi-word capitalised sequence ("Porto Alegre is lovely")
    if name.lower().endswith(("ing", "ndo")):
        return False
    following = sentence[end:].lstrip(" ,")
    if re.match(r"['’]s\b", sentence[end:]):
        return True
    next_word = following.split(" ", 1)[0].lower() if following else ""
    return next_word in NAME_FOLLOWERS


# "my dog Rex", "a cat named Mia", "meu cachorro Thor": the name is an animal's, not a person's
PET_WORDS = frozenset(
    ["dog", "dogs", "puppy", "pup", "cat", "cats", "kitten", "kitty", "pet", "pets", "horse", "parrot", "rabbit", "bunny", "hamster", "turtle", "cachorro", "cachorra", "cachorrinho", "cachorrinha", "cão", "cadela", "gato", "gata", "gatinho", "gatinha", "cavalo", "papagaio", "coelho", "calopsita"]
)
NAMING_WORDS = frozenset({"named", "called", "chamado", "chamada"})


def _after_a_pet_word(words: list[str]) -> bool:
    """The words before a name end in a pet word ("my dog", "a cat named")."""
    last = words[-1].strip(",") if words else ""
    if last in NAMING_WORDS and len(words) > 1:
        last = words[-2].strip(",")
    return last in PET_WORDS


def guess_type(sentence: str, start: int) -> str:
    before = sentence[:start].rstrip().rsplit(" ", 1)[-1].lower() if start else ""
    if _after_a_pet_word(sentence[:start].lower().split()):
        return "animal"
    if before in {"in", "to", "from", "em", "para", "pra", "de", "near", "visited", "visitei"}:
        return "place"
    if before in {"at", "na", "no", "pela", "pelo", "joined"}:
        return "organization"
    return "person"


def type_of(name: str, names: list[tuple[str, str, int]]) -> str:
    for other, entity_type, _ in names:
        if fold_case(other) == fold_case(name):
            return entity_type
    return "person"
