"""Compound sentences → clauses, so each single-valued statement becomes its own fact.

Why: "I live in Lisbon and work at Acme" kept as one fact carries only *one* attribute key
(residence), so a later "I moved to Porto" would supersede the whole sentence — the job
with it. Split, the city and the job are two facts and a move replaces only the city.

The split is deliberately narrow (a wrong split garbles a fact; a missed one only keeps the
old behaviour): a clause boundary is a comma/semicolon or "and/but/e/mas", and it is taken
only when

* the part after it starts with an attribute verb phrase ("work at…", "I now work at…",
  "moro em…", "sou professora") that one of the attribute or negation patterns really
  matches once its subject is filled in, and
* the part before it has at least three words ("My sister and I live…" stays whole).

An elided subject is filled in from the head clause: a Portuguese first-person verb
("e trabalho na Natura") needs none; otherwise the head's words before its own verb are
reused ("My brother Carlos lives in Porto and works at X" → "My brother Carlos works at
X"); failing that, a first-person head gives "I" and a head starting with a name that name.
A head that is a self-introduction ("I'm Rita, I live in Lisbon") is a clause of its own.
"Sou professora e adoro ler" stays one clause: "adoro ler" states no attribute.
"""

from __future__ import annotations

import re

from engramdb.domain.text import NAME_WORD_RE
from engramdb.services.extraction.rule_based.grammar import leading_name
from engramdb.services.extraction.rule_based.patterns import (
    ATTRIBUTE_PATTERNS,
    FIRST_PERSON,
    FIRST_PERSON_I,
    NAME,
    NEGATIONS,
)
from engramdb.services.extraction.rule_based.speech_acts import self_introduction

_BOUNDARY = re.compile(
    r"\s*[,;]\s*(?:(?:and|but|e|mas)\s+)?|\s+(?:and|but|e|mas)\s+", re.IGNORECASE
)

# Portuguese first-person verb forms: the verb alone says who the subject is.
_PT_FIRST = (
    r"moro|moramos|vivo|vivemos|mudei|mudamos|me\s+mudei|nos\s+mudamos|trabalho|trabalhamos"
    r"|sou|somos|estou|tenho"
)
_EN_VERBS = r"live|lives|moved|relocated|work|works|am|is"
_PT_THIRD = r"mora|moram|vive|vivem|mudou|mudaram|se\s+mudou|trabalha|trabalham|é|está|tem"
_ADVERBS = r"(?:(?:now|also|just|recently|currently|still|agora|também|já|atualmente|ainda)\s+)*"
_NEGATION = r"(?:(?:no\s+longer|don['’]t|do\s+not|doesn['’]t|does\s+not|never|não)\s+)?"

_TAIL = re.compile(
    rf"^{_ADVERBS}(?P<subject>I(?=\s)|I(?=['’]m\b)|we|eu|nós|{NAME}(?=\s))?\s*"
    rf"(?P<contraction>['’]m\s+)?{_ADVERBS}{_NEGATION}{_ADVERBS}"
    rf"(?P<verb>{_PT_FIRST}|{_EN_VERBS}|{_PT_THIRD})\b",
    re.IGNORECASE,
)
_PT_FIRST_RE = re.compile(rf"^(?:{_PT_FIRST})$", re.IGNORECASE)
# The head's own verb: what comes before it is the subject an elided tail shares.
_HEAD_VERB = re.compile(rf"\b{_NEGATION}{_ADVERBS}(?:{_EN_VERBS}|{_PT_THIRD})\b", re.IGNORECASE)


def _states_attribute(clause: str) -> bool:
    return any(rx.search(clause) for _, rx in NEGATIONS) or any(
        p.regex.search(clause) for p in ATTRIBUTE_PATTERNS
    )


def _with_subject(head: str, tail: str) -> str | None:
    """``tail`` with its subject, or None when it cannot be told (then: no split)."""
    match = _TAIL.match(tail)
    if match is None:
        return None
    if match.group("subject") or match.group("contraction"):
        return tail
    if _PT_FIRST_RE.match(match.group("verb")):
        return tail
    if match.group("verb").lower() in {"am", "is", "é", "está", "tem"}:
        return None  # "…, is a nurse": too easy to get the subject wrong
    own = _HEAD_VERB.search(head)
    if own is not None and own.start() > 0 and NAME_WORD_RE.search(head[: own.start()]):
        return f"{head[: own.start()].strip()} {tail}"
    if FIRST_PERSON_I.search(head) or FIRST_PERSON.search(head):
        return f"I {tail}" if re.match(_EN_VERBS, match.group("verb"), re.IGNORECASE) else None
    name = leading_name(head)
    if name and head.startswith(name):
        return f"{name} {tail}"
    return None


def split_clauses(sentence: str) -> list[str]:
    """The sentence's clauses (the sentence itself when it is not a compound statement)."""
    clauses: list[str] = []
    start = 0
    for boundary in _BOUNDARY.finditer(sentence):
        head = sentence[start : boundary.start()].strip()
        tail = sentence[boundary.end() :].strip()
        if not tail:
            continue
        if len(NAME_WORD_RE.findall(head)) < 3 and self_introduction(head) is None:
            continue
        full = _with_subject(head, tail)
        if full is None or not _states_attribute(full):
            continue
        clauses.append(head)
        start = boundary.end()
        if full != tail:  # the subject was filled in: continue on the rewritten tail
            return [*clauses, *split_clauses(full)]
    clauses.append(sentence[start:].strip())
    return [c for c in clauses if c]
