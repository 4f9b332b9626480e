"""Sentences that are acts, not statements: retraction requests and self-introductions.

Why its own module: both must be recognised *before* the sentence is read as a fact —
"Forget that I like sushi" contains the statement "I like sushi", and reading it as one
would store exactly what the user asked to forget; "Eu sou o João" read as a statement and
rewritten to the speaker becomes the tautology "João é o João".

* :func:`retraction_request` — "(please) forget (that|about) …", "don't remember that …",
  "esquece/esqueça (que|de que) …", "apaga que …": returns the statement to forget. The
  extractor turns it into a ``RETRACT`` (of the matching known fact, or — with no known
  facts in view — of the fact with the same text, which reconciliation finds by
  fingerprint) and never into a stored fact.
* :func:`self_introduction` — "I'm Rita", "My name is Rita", "Eu sou o João", "Meu nome é
  João", "Me chamo João": returns the name introduced.
* :func:`matching_known_fact` — the known fact a retraction request names: same text after
  rewriting to the speaker, else the known fact of the subject whose words cover the
  request's words best (a crude 4-letter stem, so "gosto"/"gosta" and "like"/"likes" meet).
"""

from __future__ import annotations

import re

from engramdb.domain.extraction import ExtractionInput, KnownFact
from engramdb.domain.text import NAME_WORD_RE, STOPWORDS_EXTRACTION, fold_case
from engramdb.services.extraction.rule_based.known import keys_of
from engramdb.services.extraction.rule_based.patterns import NAME

_POLITE = (
    r"(?:(?:please|pls|ok|okay|and|also|actually|por\s+favor|pode|podes|você\s+pode|"
    r"can\s+you|could\s+you|would\s+you|will\s+you)[\s,]+)*"
)
_FORGET = re.compile(
    rf"^{_POLITE}(?:"
    r"(?:forget|disregard|delete|erase|remove|drop|unlearn)\s+(?:about\s+)?(?:the\s+fact\s+)?(?:that\s+)?"
    r"|(?:don['’]t|do\s+not)\s+remember\s+(?:that\s+)?"
    r"|(?:esquece|esqueça|esqueca|esquecer|esqueçam|apaga|apague|apagar|desconsidera|desconsidere)"
    r"(?:-se)?\s+(?:(?:de\s+)?que\s+|o\s+que\s+eu\s+disse\s+sobre\s+|isso\s+de\s+que\s+)?"
    r"|(?:não|nao)\s+(?:te\s+)?lembr[ae]s?\s+(?:mais\s+)?(?:de\s+)?que\s+"
    r")(?P<statement>.+?)[\s.!]*$",
    re.IGNORECASE,
)
_GREETING = r"(?:(?:hi|hello|hey|oi|olá|ola)[\s,!]+)?"
# Explicit forms name the speaker for sure; a bare "I'm X" may be "I'm Italian", so it only
# counts when X *is* the speaker (the tautology to avoid), see :func:`self_introduction`.
_INTRO_EXPLICIT = re.compile(
    rf"^{_GREETING}(?:my\s+name\s+is|call\s+me|(?:eu\s+)?sou\s+(?:o|a)|(?:o\s+)?meu\s+nome\s+é"
    rf"|(?:eu\s+)?me\s+chamo|chamo-me|aqui\s+é\s+(?:o|a))\s+(?P<name>{NAME})[\s.!]*$",
    re.IGNORECASE,
)
_INTRO_BARE = re.compile(
    rf"^{_GREETING}(?:I['’]m|I\s+am|this\s+is)\s+(?P<name>{NAME})[\s.!]*$", re.IGNORECASE
)
_STEM = 4


def retraction_request(sentence: str) -> str | None:
    """The statement a "forget that …" request asks to forget, else None."""
    match = _FORGET.match(sentence.strip())
    if match is None:
        return None
    statement = match.group("statement").strip(" ,")
    return statement if NAME_WORD_RE.search(statement) else None


def self_introduction(sentence: str) -> tuple[str, bool] | None:
    """(name, explicit) of a self-introduction ("Eu sou o João" → ("João", True)), else None.

    ``explicit`` is False for a bare "I'm X"/"I am X", which names the speaker only if X
    is the speaker's name ("I'm Italian" is a statement, not an introduction).
    """
    sentence = sentence.strip()
    for regex, explicit in ((_INTRO_EXPLICIT, True), (_INTRO_BARE, False)):
        match = regex.match(sentence)
        if match is None:
            continue
        name = match.group("name").strip()
        if any(w.lower() in STOPWORDS_EXTRACTION for w in name.split()):
            return None  # "I'm So tired": not a name
        return name, explicit
    return None


def same_person(name: str, speaker: str) -> bool:
    """Whether two names are one speaker: "João" / "João Silva" (word sets nest)."""
    a = {fold_case(w) for w in NAME_WORD_RE.findall(name)}
    b = {fold_case(w) for w in NAME_WORD_RE.findall(speaker)}
    return bool(a and b) and (a <= b or b <= a)


def _stems(text: str, ignore: set[str]) -> set[str]:
    words = (fold_case(w) for w in NAME_WORD_RE.findall(text))
    return {w[:_STEM] for w in words if w not in STOPWORDS_EXTRACTION and w not in ignore}


def _normal(text: str) -> str:
    return " ".join(fold_case(w) for w in NAME_WORD_RE.findall(text))


def matching_known_fact(request: ExtractionInput, subject: str, statement: str) -> KnownFact | None:
    """The known fact of ``subject`` that ``statement`` (already rewritten) names, if any.

    Exact text first; else every content stem of the statement must occur in the fact
    (subject words ignored), the fact with the fewest extra stems wins, ties by order.
    """
    keys = set(keys_of(request, subject))
    facts = [f for f in request.known_facts if f.entity_key in keys]
    wanted = _normal(statement)
    for fact in facts:
        if _normal(fact.text) == wanted:
            return fact
    ignore = {fold_case(w) for w in NAME_WORD_RE.findall(subject)} | {"i", "eu", "user"}
    stems = _stems(statement, ignore)
    if not stems:
        return None
    best: tuple[int, KnownFact] | None = None
    for fact in facts:
        have = _stems(fact.text, ignore)
        if stems <= have and (best is None or len(have - stems) < best[0]):
            best = (len(have - stems), fact)
    return None if best is None else best[1]
