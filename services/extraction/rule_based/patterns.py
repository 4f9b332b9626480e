"""Regexes of the rule-based extractor: names, first person, attribute/relationship phrasings.

Why its own module: every phrasing the extractor recognises is a regex here, so "which
sentences does it understand?" is answered by reading one file. Compiled once at import;
built from the word lists in :mod:`.lexicon`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engramdb.services.extraction.rule_based.lexicon import CONNECTORS, RELATIONS

# A capitalised name of one or more words, optionally joined by a connector.
_CAP = "A-ZÀ-ÖØ-Þ"
NAME = rf"[{_CAP}][\w’'-]*(?:\s+(?:(?:{'|'.join(CONNECTORS)})\s+)?[{_CAP}][\w’'-]*)*"

# "I" is matched case-sensitively (a lowercase "i" is not a pronoun in PT); the rest not.
FIRST_PERSON_I = re.compile(r"\bI\b|\bI['’](?:m|ve|d|ll)\b")
FIRST_PERSON = re.compile(
    r"\b(?:my|me|mine|myself|we|our|ours|us"
    r"|eu|meu|minha|meus|minhas|comigo|nós|nosso|nossa|nossos|nossas"
    r"|moro|trabalho|sou|estou|tenho|gosto|adoro|mudei|fui|morei|estudo|prefiro)\b",
    re.IGNORECASE,
)

_REL_ALT = "|".join(re.escape(k) for k in sorted(RELATIONS, key=len, reverse=True))

_OBJ = r"(?P<obj>[^,;.!?]+)"
_ADV = r"(?:(?:now|just|recently|finally|still|currently|also|agora|também|já|atualmente)\s+)?"


@dataclass(frozen=True)
class AttributePattern:
    attribute: str | None
    category: str
    regex: re.Pattern[str]
    obj_type: str | None = None  # entity type of a capitalised object
    relation: str | None = None  # relationship self/subject -> object


def _p(
    attribute: str | None,
    category: str,
    regex: str,
    obj_type: str | None = None,
    relation: str | None = None,
) -> AttributePattern:
    return AttributePattern(
        attribute, category, re.compile(regex, re.IGNORECASE), obj_type, relation
    )


NEGATIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "residence",
        re.compile(
            r"\b(?:no longer|don['’]t|do not|doesn['’]t|does not|not)\s+(?:\w+\s+)?live\b"
            r"|\bmoved (?:out of|away from)\b"
            r"|\bnão\s+(?:\w+\s+)?(?:moro|mora|moramos|vivo|vive)\b|\b(?:moro|mora) mais\b",
            re.IGNORECASE,
        ),
    ),
    (
        "workplace",
        re.compile(
            r"\b(?:no longer|don['’]t|do not|doesn['’]t|does not|not)\s+(?:\w+\s+)?work\b"
            r"|\b(?:quit|left) (?:my|his|her|the) job\b|\bgot (?:fired|laid off)\b"
            r"|\bnão\s+(?:\w+\s+)?(?:trabalho|trabalha)\b|\bpedi demissão\b"
            r"|\bfui demitid[oa]\b",
            re.IGNORECASE,
        ),
    ),
)

ATTRIBUTE_PATTERNS: tuple[AttributePattern, ...] = (
    _p(
        "residence",
        "personal",
        rf"\b(?:live|lives|living|moved|relocated)\s+(?:back\s+)?(?:in|to|into)\s+"
        rf"(?:the\s+city\s+of\s+)?{_OBJ}",
        "place",
        "lives_in",
    ),
    _p(
        "residence",
        "personal",
        rf"\b(?:moro|mora|moramos|moram|morando|vivo|vive|vivemos)\s+{_ADV}"
        rf"(?:em|no|na|nos|nas)\s+{_OBJ}",
        "place",
        "lives_in",
    ),
    _p(
        "residence",
        "personal",
        rf"\b(?:mudei|mudou|mudamos|mudaram)\s+{_ADV}(?:para|pra|pro)\s+"
        rf"(?:(?:o|a|os|as)\s+)?{_OBJ}",
        "place",
        "lives_in",
    ),
    _p(
        "workplace",
        "work",
        rf"\b(?:work|works|working)\s+(?:at|for)\s+(?:the\s+)?{_OBJ}",
        "organization",
        "works_at",
    ),
    _p(
        "workplace",
        "work",
        rf"\b(?:trabalho|trabalha|trabalhamos|trabalham|trabalhando)\s+{_ADV}"
        rf"(?:na|no|nas|nos|para|pra|pela|pelo)\s+{_OBJ}",
        "organization",
        "works_at",
    ),
    _p("job_title", "work", rf"(?:\bI['’]m|\bI am|\bis)\s+{_ADV}(?:a|an)\s+{_OBJ}"),
    _p("job_title", "work", rf"\b(?:work|works|working)\s+as\s+(?:a|an)\s+{_OBJ}"),
    _p(
        "job_title",
        "work",
        rf"(?:\bsou|\bé|\btrabalho como|\btrabalha como)\s+{_ADV}(?:(?:um|uma)\s+)?{_OBJ}",
    ),
    _p(
        "relationship_status",
        "relationship",
        r"(?:\bI['’]m|\bI am|\bis|\bgot)\s+(?:now\s+|happily\s+)?"
        r"(?P<obj>married|single|divorced|engaged|widowed|separated)\b",
    ),
    _p(
        "relationship_status",
        "relationship",
        r"(?:\bsou|\bestou|\bé|\bestá|\bfiquei|\bficou)\s+(?:agora\s+)?"
        r"(?P<obj>casad[oa]|solteir[oa]|divorciad[oa]|noiv[oa]|viúv[oa]|separad[oa])\b",
    ),
    _p(
        "relationship_status",
        "relationship",
        r"\b(?:me\s+|se\s+)?(?P<obj>casei|casou|divorciei|divorciou)\b",
    ),
    _p(
        "age",
        "personal",
        r"(?:\bI['’]m|\bI am|\bis)\s+(?P<obj>\d{1,3})(?=\s*(?:years?\s+old\b|y/?o\b|[,.;!]|$))",
    ),
    _p("age", "personal", r"(?:\btenho|\btem)\s+(?P<obj>\d{1,3})\s+anos\b"),
)

REL_PATTERNS = (
    re.compile(
        rf"\b(?:[Mm]y|[Oo]ur|[Mm]inha|[Mm]eu|[Nn]ossa|[Nn]osso)\s+(?P<rel>{_REL_ALT})\s*,?\s+(?P<name>{NAME})"
    ),
    re.compile(
        rf"(?P<name>{NAME})\s*,?\s+(?:is|was|é|era)\s+(?:my|minha|meu)\s+(?P<rel>{_REL_ALT})\b"
    ),
)

CATEGORY_HINTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "preference",
        re.compile(
            r"(?<!would )(?<!['’]d )\b(?:like|likes|love|loves|enjoy|enjoys|adore|adores|prefer|"
            r"prefers|hate|hates|dislike|dislikes|favou?rite|gosto|gosta|adoro|adora|amo|ama|"
            r"curto|curte|prefiro|prefere|odeio|odeia|favorit[oa])\b",
            re.IGNORECASE,
        ),
    ),
    (
        "health",
        re.compile(
            r"\b(?:sick|ill|doctor|hospital|surgery|pain|medication|allergic|diagnosed|therapy|"
            r"doente|médico|hospital|cirurgia|dor|remédio|alérgic[oa]|diagnosticad[oa]|terapia)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "plan",
        re.compile(
            r"\b(?:going to|gonna|will|plan to|planning|next (?:week|month|year)|tomorrow|"
            r"vou|vamos|pretendo|planejo|semana que vem|mês que vem|ano que vem|amanhã)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "work",
        re.compile(
            r"\b(?:job|work|works|office|boss|company|project|career|trabalho|empresa|"
            r"escritório|chefe|projeto|carreira)\b",
            re.IGNORECASE,
        ),
    ),
    (
        "event",
        re.compile(
            r"\b(?:yesterday|last (?:week|month|year|night)|went|visited|attended|met|"
            r"ontem|semana passada|mês passado|ano passado|fui|visitei|conheci)\b",
            re.IGNORECASE,
        ),
    ),
)

SENTENCE_SPLIT = re.compile(r"(?<=[.!?…])\s+|\n+")
