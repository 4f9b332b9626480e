"""Small grammar of the rule-based extractor: names out of phrases, job titles, rewriting
a leading first person ("I moved…", "Moro em…") into the speaker's name.

Why its own module: these are pure string functions with no extraction state — each can
be understood (and tested) on a single sentence, apart from the per-sentence decisions in
:mod:`.extractor`.
"""

from __future__ import annotations

import re
import unicodedata

from engramdb.domain.text import STOPWORDS_EXTRACTION
from engramdb.services.extraction.rule_based.lexicon import (
    CONNECTORS,
    EN_ADVERBS,
    EN_IRREGULAR,
    EN_MODALS,
    JOB_STOP,
    JOB_SUFFIXES_EN,
    JOB_WORDS,
    NOT_JOBS,
    PT_VERBS,
)
from engramdb.services.extraction.rule_based.patterns import NAME


def slug(text: str) -> str:
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")


def strip_possessive(word: str) -> str:
    return re.sub(r"['’]s$", "", word)


def leading_name(obj: str) -> str | None:
    """The capitalised name at the start of a pattern's object ("Porto Alegre last year")."""
    obj = obj.strip()
    match = re.match(NAME, obj)
    if not match:
        return None
    tokens = match.group(0).split()
    while tokens and tokens[0].lower() in STOPWORDS_EXTRACTION:
        tokens.pop(0)
    while (
        len(tokens) > 1
        and tokens[-1].lower() in STOPWORDS_EXTRACTION
        and tokens[-2].lower() not in CONNECTORS  # keep "Rio de Janeiro"
    ):
        tokens.pop()
    if not tokens or (len(tokens) == 1 and tokens[0].lower() in STOPWORDS_EXTRACTION):
        return None
    return strip_possessive(" ".join(tokens))


def job_title(obj: str) -> str | None:
    words: list[str] = []
    for word in obj.strip().split():
        if word.lower() in JOB_STOP or len(words) == 3:
            break
        words.append(word)
    if not words:
        return None
    last = words[-1].lower()
    if last in NOT_JOBS:
        return None
    if last in JOB_WORDS or (last.endswith(JOB_SUFFIXES_EN) and last.isascii()):
        return " ".join(words)
    return None


def _en_third_person(verb: str) -> str | None:
    low = verb.lower()
    if low in EN_IRREGULAR:
        return EN_IRREGULAR[low]
    if low in EN_MODALS or low.endswith("ed"):
        return verb
    if not low.isalpha() or low in STOPWORDS_EXTRACTION:
        return None
    if re.search(r"[^aeiou]y$", low):
        return verb[:-1] + "ies"
    if re.search(r"(?:s|sh|ch|x|z|o)$", low):
        return verb + "es"
    return verb + "s"


def name_the_possessor(sentence: str, speaker: str | None) -> str:
    """A fact a speaker states about their own people names the speaker: "My brother Carlos
    lives in Porto" → "Rita's brother Carlos lives in Porto".

    Why: the fact outlives the conversation, and in memory "my" would mean whoever reads it —
    in a two-person chat, either speaker. Only a leading English "My" with no other first
    person left in the sentence (else verbatim: a faithful sentence beats a wrong rewrite);
    Portuguese ("Meu irmão…") would need the noun phrase moved ("O irmão de Rita…") and is
    kept as said.
    """
    if not speaker:
        return sentence
    mine = re.match(r"^[Mm]y\s+(?P<rest>\S.*)$", sentence)
    if not mine:
        return sentence
    rest = re.sub(r"\bmy\b", f"{speaker}'s", mine.group("rest"))
    if re.search(r"\b(?:I|me|mine|myself|we|us|our)\b|\bI['’]", rest):
        return sentence
    return f"{speaker}'s {rest}"


def rewrite_first_person(sentence: str, speaker: str | None) -> str:
    """Rewrite a *simple* leading first person to the speaker's name; else keep as-is.

    "I moved to Porto Alegre" → "Caroline moved to Porto Alegre"; "I'm a teacher" →
    "Caroline is a teacher"; "Eu moro em Lisboa" / "Moro em Lisboa" → "Ana mora em Lisboa";
    "Big news: I moved to Porto Alegre" → "Caroline moved to Porto Alegre" (a preamble of up to
    three words before a colon is dropped only when the clause after it is rewritten).
    Anything harder (first person left later in the sentence, unknown verb) stays verbatim:
    a faithful sentence beats a wrong rewrite.
    """
    if not speaker:
        return sentence
    # a short preamble before a colon ("Big news: I moved to…", "Novidade: mudei para…")
    # says nothing the fact needs: the clause after it is the fact, rewritten as any other
    preamble = re.match(r"^\w+(?:\s+\w+){0,2}\s*:\s+(?=\S)", sentence)
    if preamble:
        rewritten = rewrite_first_person(sentence[preamble.end() :], speaker)
        return rewritten if rewritten.startswith(f"{speaker} ") else sentence
    lead = re.match(r"^(?P<adv>[A-Za-z]+)\s*,?\s+(?=I\b)", sentence)
    if lead and lead.group("adv").lower() in EN_ADVERBS:  # "now I work at…"
        rewritten = rewrite_first_person(sentence[lead.end() :], speaker)
        if rewritten.startswith(f"{speaker} "):
            rest = rewritten[len(speaker) + 1 :]
            return f"{speaker} {lead.group('adv').lower()} {rest}"
        return sentence
    en = re.match(r"^I(?:(?P<contr>['’](?:m|ve|ll|d))|\s+(?P<verb>[\w’']+))(?P<rest>.*)$", sentence)
    if en:
        rest = en.group("rest")
        if en.group("contr"):
            contr = en.group("contr")[1:]
            head = {"m": "is", "ve": "has", "ll": "will", "d": "would"}[contr]
        else:
            verb = en.group("verb")
            adverb = ""
            longer = re.match(r"\s+longer\s+(?P<verb>[\w’']+)(?P<rest>.*)$", rest)
            if verb.lower() == "no" and longer:  # "I no longer work at…"
                verb, rest, adverb = longer.group("verb"), longer.group("rest"), "no longer "
            elif verb.lower() in EN_ADVERBS:
                nxt = re.match(r"\s+(?P<verb>[\w’']+)(?P<rest>.*)$", rest)
                if not nxt:
                    return sentence
                adverb, verb, rest = verb + " ", nxt.group("verb"), nxt.group("rest")
            third = _en_third_person(verb)
            if third is None:
                return sentence
            head = adverb + third
        rest = re.sub(r"\bmy\b", f"{speaker}'s", rest)
        rest = re.sub(r"\bmyself\b", "themselves", rest)
        if re.search(r"\b(?:I|me|mine)\b|\bI['’]", rest):
            return sentence
        return f"{speaker} {head}{rest}"
    pt = re.match(
        r"^(?:[Ee]u\s+)?(?P<adv>(?:[Aa]gora|[Tt]ambém|[Jj]á|[Aa]tualmente|[Aa]inda)\s+)?"
        r"(?P<neg>[Nn]ão\s+)?(?P<refl>[Mm]e\s+)?(?P<verb>[\wçãéáíóúêâô]+)(?P<rest>.*)$",
        sentence,
    )
    if pt:
        verb = pt.group("verb").lower()
        if verb in PT_VERBS:
            third = PT_VERBS[verb]
        elif verb.endswith("ei") and len(verb) > 4:
            third = verb[:-2] + "ou"
        else:
            return sentence
        # Coordinated first-person verbs follow along: "sou professora e adoro ler".
        rest = re.sub(
            r"\b(e|mas)\s+(\w+)\b",
            lambda m: f"{m.group(1)} {PT_VERBS.get(m.group(2).lower(), m.group(2))}",
            pt.group("rest"),
        )
        if re.search(r"\b(?:eu|meu|minha|meus|minhas|me|mim|comigo)\b", rest, re.IGNORECASE):
            return sentence
        refl = "se " if pt.group("refl") else ""
        head = (pt.group("adv") or "").lower() + (pt.group("neg") or "").lower()
        return f"{speaker} {head}{refl}{third}{rest}"
    return sentence
