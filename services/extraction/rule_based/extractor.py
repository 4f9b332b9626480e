"""LOW-QUALITY offline fallback extractor: regexes for English and Portuguese, no LLM.

Why it exists: engramdb must start and remember *something* with no API key and no
network (tests, demos, air-gapped use). It is **not** a substitute for the LLM extractor:
it keeps whole sentences as facts, recognises only a handful of attribute and relationship
phrasings, guesses entity types from prepositions, and misses anything implicit. Services
print :data:`OFFLINE_NOTICE` when they fall back to it, and every fact it produces carries
``extractor="rule-based"`` as provenance so it can be re-extracted later with an LLM.

What it does, per sentence (deterministic: same input ⇒ same output):

* skips questions, greetings/thanks and utterances under three words;
* first person (I/my/me…, eu/meu/minha/moro/trabalho…) → the speaker's self entity (the
  speaker's name, else ``"user"``); capitalised words → entities (a small EN+PT stopword
  list keeps sentence-initial common words out);
* single-valued attributes: ``residence`` (lives in / moved to / moro em / mudei para),
  ``workplace`` (works at / trabalho na), ``job_title`` (I'm a teacher / sou professor),
  ``relationship_status``, ``age``; a known fact of the same entity and attribute turns the
  statement into an ``UPDATE`` of it, and a negation (I no longer live in / não moro mais)
  into a ``RETRACT`` — only when such a known fact exists;
* relationships: "my wife Ana", "minha irmã Ana", "Ana is my sister" → self → Ana;
* every remaining first-person or entity-mentioning sentence becomes a fact whose text is
  the sentence, with a simple leading "I …"/"Eu …" rewritten to the speaker's name.
"""

from __future__ import annotations

import re
import time
import unicodedata
from dataclasses import dataclass, field

from engramdb.domain.extraction import (
    ConfidenceLevel,
    ExtractedEntity,
    ExtractedFact,
    ExtractedRelationship,
    Extraction,
    ExtractionInput,
    ExtractorInfo,
    KnownEntity,
    KnownFact,
)
from engramdb.domain.text import NAME_WORD_PATTERN as _WORD
from engramdb.domain.text import NAME_WORD_RE as _TOKEN
from engramdb.domain.text import STOPWORDS_EXTRACTION as _STOPWORDS
from engramdb.domain.text import fold_case as _fold
from engramdb.domain.text import is_greeting_sentence as _is_greeting
from engramdb.services.extraction import ExtractionOutcome

OFFLINE_NOTICE = (
    "engramdb: no LLM configured — using the low-quality rule-based extractor "
    "(set ENGRAMDB_LLM_API_KEY, and optionally ENGRAMDB_LLM_BASE_URL/ENGRAMDB_LLM_MODEL, "
    "to extract facts with an LLM)"
)
RULES_VERSION = "rule-based/v1"
SELF_FALLBACK = "user"

_CAP = "A-ZÀ-ÖØ-Þ"
_CONNECTORS = ("de", "da", "do", "dos", "das", "of", "del", "van", "von")
_NAME = rf"[{_CAP}][\w’'-]*(?:\s+(?:(?:{'|'.join(_CONNECTORS)})\s+)?[{_CAP}][\w’'-]*)*"

# --------------------------------------------------------------------------- vocabularies


def _words(text: str) -> frozenset[str]:
    """A word list written as a whitespace-separated block (readable, easy to extend)."""
    return frozenset(text.split())


# Words after a sentence-initial capitalised word that make it likely a name.
_NAME_FOLLOWERS = _words(
    """
    is was has had and said says told lives lived works worked moved loves likes enjoys
    will would just got went came gave took called asked wants needs can could did does
    é foi está estava tem tinha mora morava trabalha trabalhava mudou gosta adora ama vai
    disse falou e também já
    """
)

# "I" is matched case-sensitively (a lowercase "i" is not a pronoun in PT); the rest not.
_FIRST_PERSON_I = re.compile(r"\bI\b|\bI['’](?:m|ve|d|ll)\b")
_FIRST_PERSON = re.compile(
    r"\b(?:my|me|mine|myself|we|our|ours|us"
    r"|eu|meu|minha|meus|minhas|comigo|nós|nosso|nossa|nossos|nossas"
    r"|moro|trabalho|sou|estou|tenho|gosto|adoro|mudei|fui|morei|estudo|prefiro)\b",
    re.IGNORECASE,
)

_PT_MARKERS = _words(
    "eu meu minha não que de em na no com para pra você é está sou moro trabalho uma um "
    "mas também muito agora ontem hoje"
)
_EN_MARKERS = _words(
    "i my me the and is are was to in at with for you it not but also very now a an"
)

_JOB_WORDS = _words(
    """
    teacher engineer developer programmer doctor nurse lawyer student designer writer
    artist musician manager chef cook accountant architect scientist researcher consultant
    dentist pharmacist photographer journalist firefighter officer counselor therapist
    psychologist driver farmer pilot mechanic electrician plumber carpenter librarian
    professor surgeon veterinarian vet analyst entrepreneur founder freelancer painter
    singer dancer actor actress baker barista cashier salesman waiter waitress coach
    trainer tutor editor translator economist biologist chemist physicist mathematician
    historian secretary receptionist assistant intern director ceo cto cfo
    professora engenheiro engenheira desenvolvedor desenvolvedora programador programadora
    médico médica enfermeiro enfermeira advogado advogada estudante arquiteto arquiteta
    jornalista motorista vendedor vendedora policial cozinheiro cozinheira garçom garçonete
    dentista psicólogo psicóloga contador contadora empresário empresária gerente analista
    cientista pesquisador pesquisadora músico musicista artista escritor escritora
    fotógrafo fotógrafa designer pintor pintora cantor cantora ator atriz padeiro padeira
    bombeiro bombeira piloto mecânico eletricista encanador carpinteiro bibliotecário
    bibliotecária cirurgião cirurgiã veterinário veterinária economista biólogo bióloga
    químico química físico física tradutor tradutora secretária recepcionista estagiário
    estagiária diretor diretora consultor consultora treinador treinadora
    """
)
_JOB_SUFFIXES_EN = ("ist", "ian", "eer", "ologist")
_NOT_JOBS = _words(
    """
    fan lover mother father sister brother daughter son wife husband friend member beginner
    newbie believer optimist pessimist perfectionist realist idealist introvert extrovert
    vegetarian vegan christian otimista pessimista perfeccionista realista idealista egoísta
    """
)
_JOB_STOP = _words(
    "of at in for and with who that from on to by de em na no que e com do da para pela pelo"
)

# relation word -> (relation_type, lowercased relation word for the fact's meaning)
_RELATIONS: dict[str, str] = {
    "wife": "married_to",
    "husband": "married_to",
    "spouse": "married_to",
    "partner": "partner_of",
    "girlfriend": "partner_of",
    "boyfriend": "partner_of",
    "fiance": "engaged_to",
    "fiancé": "engaged_to",
    "fiancee": "engaged_to",
    "fiancée": "engaged_to",
    "best friend": "friend_of",
    "friend": "friend_of",
    "sister": "sibling_of",
    "brother": "sibling_of",
    "mother": "child_of",
    "mom": "child_of",
    "father": "child_of",
    "dad": "child_of",
    "son": "parent_of",
    "daughter": "parent_of",
    "boss": "reports_to",
    "manager": "reports_to",
    "colleague": "colleague_of",
    "coworker": "colleague_of",
    "co-worker": "colleague_of",
    "cousin": "cousin_of",
    "aunt": "relative_of",
    "uncle": "relative_of",
    "grandmother": "grandchild_of",
    "grandma": "grandchild_of",
    "grandfather": "grandchild_of",
    "grandpa": "grandchild_of",
    "neighbor": "neighbor_of",
    "neighbour": "neighbor_of",
    "roommate": "roommate_of",
    "esposa": "married_to",
    "marido": "married_to",
    "mulher": "married_to",
    "namorada": "partner_of",
    "namorado": "partner_of",
    "noiva": "engaged_to",
    "noivo": "engaged_to",
    "melhor amiga": "friend_of",
    "melhor amigo": "friend_of",
    "amiga": "friend_of",
    "amigo": "friend_of",
    "irmã": "sibling_of",
    "irmão": "sibling_of",
    "mãe": "child_of",
    "pai": "child_of",
    "filho": "parent_of",
    "filha": "parent_of",
    "chefe": "reports_to",
    "colega": "colleague_of",
    "primo": "cousin_of",
    "prima": "cousin_of",
    "tia": "relative_of",
    "tio": "relative_of",
    "avó": "grandchild_of",
    "avô": "grandchild_of",
    "vizinha": "neighbor_of",
    "vizinho": "neighbor_of",
}
_REL_ALT = "|".join(re.escape(k) for k in sorted(_RELATIONS, key=len, reverse=True))

_SINGLE_VALUED = ("residence", "workplace", "job_title", "relationship_status", "age")

# --------------------------------------------------------------------------- patterns

_OBJ = r"(?P<obj>[^,;.!?]+)"
_ADV = r"(?:(?:now|just|recently|finally|still|currently|also|agora|também|já|atualmente)\s+)?"


@dataclass(frozen=True)
class _Pattern:
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
) -> _Pattern:
    return _Pattern(attribute, category, re.compile(regex, re.IGNORECASE), obj_type, relation)


_NEGATIONS: tuple[tuple[str, re.Pattern[str]], ...] = (
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

_ATTRIBUTE_PATTERNS: tuple[_Pattern, ...] = (
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

_REL_PATTERNS = (
    re.compile(
        rf"\b(?:[Mm]y|[Oo]ur|[Mm]inha|[Mm]eu|[Nn]ossa|[Nn]osso)\s+(?P<rel>{_REL_ALT})\s*,?\s+(?P<name>{_NAME})"
    ),
    re.compile(
        rf"(?P<name>{_NAME})\s*,?\s+(?:is|was|é|era)\s+(?:my|minha|meu)\s+(?P<rel>{_REL_ALT})\b"
    ),
)

_CATEGORY_HINTS: tuple[tuple[str, re.Pattern[str]], ...] = (
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

_SENTENCE_SPLIT = re.compile(r"(?<=[.!?…])\s+|\n+")


# --------------------------------------------------------------------------- helpers


def _slug(text: str) -> str:
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")


def _strip_possessive(word: str) -> str:
    return re.sub(r"['’]s$", "", word)


def _is_portuguese(sentence: str) -> bool:
    words = [w.lower() for w in _TOKEN.findall(sentence)]
    pt = sum(w in _PT_MARKERS for w in words) + sum(ch in "ãõçáéíóúâêô" for ch in sentence.lower())
    en = sum(w in _EN_MARKERS for w in words)
    return pt > en


def _leading_name(obj: str) -> str | None:
    """The capitalised name at the start of a pattern's object ("Porto Alegre last year")."""
    obj = obj.strip()
    match = re.match(_NAME, obj)
    if not match:
        return None
    tokens = match.group(0).split()
    while tokens and tokens[0].lower() in _STOPWORDS:
        tokens.pop(0)
    while (
        len(tokens) > 1
        and tokens[-1].lower() in _STOPWORDS
        and tokens[-2].lower() not in _CONNECTORS  # keep "Rio de Janeiro"
    ):
        tokens.pop()
    if not tokens or (len(tokens) == 1 and tokens[0].lower() in _STOPWORDS):
        return None
    return _strip_possessive(" ".join(tokens))


def _job_title(obj: str) -> str | None:
    words: list[str] = []
    for word in obj.strip().split():
        if word.lower() in _JOB_STOP or len(words) == 3:
            break
        words.append(word)
    if not words:
        return None
    last = words[-1].lower()
    if last in _NOT_JOBS:
        return None
    if last in _JOB_WORDS or (last.endswith(_JOB_SUFFIXES_EN) and last.isascii()):
        return " ".join(words)
    return None


# EN present-tense verbs after "I": their third-person forms.
_EN_IRREGULAR = {
    "am": "is",
    "'m": "is",
    "’m": "is",
    "have": "has",
    "'ve": "has",
    "’ve": "has",
    "do": "does",
    "go": "goes",
    "was": "was",
}
_EN_ADVERBS = _words(
    "just also really recently finally still never always now actually usually often"
)
_EN_MODALS = _words("can could will would should might must may did was had")
_PT_VERBS = {
    "sou": "é",
    "estou": "está",
    "tenho": "tem",
    "vou": "vai",
    "fui": "foi",
    "moro": "mora",
    "trabalho": "trabalha",
    "gosto": "gosta",
    "adoro": "adora",
    "amo": "ama",
    "prefiro": "prefere",
    "vivo": "vive",
    "estudo": "estuda",
    "faço": "faz",
    "quero": "quer",
    "preciso": "precisa",
    "acho": "acha",
    "sei": "sabe",
    "posso": "pode",
    "estava": "estava",
    "tinha": "tinha",
    "morava": "morava",
    "trabalhava": "trabalhava",
    "comecei": "começou",
    "fiz": "fez",
    "tive": "teve",
    "estive": "esteve",
    "pude": "pôde",
    "quis": "quis",
    "vi": "viu",
}


def _en_third_person(verb: str) -> str | None:
    low = verb.lower()
    if low in _EN_IRREGULAR:
        return _EN_IRREGULAR[low]
    if low in _EN_MODALS or low.endswith("ed"):
        return verb
    if not low.isalpha() or low in _STOPWORDS:
        return None
    if re.search(r"[^aeiou]y$", low):
        return verb[:-1] + "ies"
    if re.search(r"(?:s|sh|ch|x|z|o)$", low):
        return verb + "es"
    return verb + "s"


def _rewrite_first_person(sentence: str, speaker: str | None) -> str:
    """Rewrite a *simple* leading first person to the speaker's name; else keep as-is.

    "I moved to Porto Alegre" → "Caroline moved to Porto Alegre"; "I'm a teacher" →
    "Caroline is a teacher"; "Eu moro em Lisboa" / "Moro em Lisboa" → "Ana mora em Lisboa".
    Anything harder (first person left later in the sentence, unknown verb) stays verbatim:
    a faithful sentence beats a wrong rewrite.
    """
    if not speaker:
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
            if verb.lower() in _EN_ADVERBS:
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
        r"^(?:[Ee]u\s+)?(?P<refl>[Mm]e\s+)?(?P<verb>[\wçãéáíóúêâô]+)(?P<rest>.*)$", sentence
    )
    if pt:
        verb = pt.group("verb").lower()
        if verb in _PT_VERBS:
            third = _PT_VERBS[verb]
        elif verb.endswith("ei") and len(verb) > 4:
            third = verb[:-2] + "ou"
        else:
            return sentence
        # Coordinated first-person verbs follow along: "sou professora e adoro ler".
        rest = re.sub(
            r"\b(e|mas)\s+(\w+)\b",
            lambda m: f"{m.group(1)} {_PT_VERBS.get(m.group(2).lower(), m.group(2))}",
            pt.group("rest"),
        )
        if re.search(r"\b(?:eu|meu|minha|meus|minhas|me|mim|comigo)\b", rest, re.IGNORECASE):
            return sentence
        refl = "se " if pt.group("refl") else ""
        return f"{speaker} {refl}{third}{rest}"
    return sentence


# --------------------------------------------------------------------------- extractor


@dataclass
class _Collected:
    facts: list[ExtractedFact] = field(default_factory=list)
    entities: dict[str, ExtractedEntity] = field(default_factory=dict)  # folded name -> entity
    relationships: dict[tuple[str, str, str], ExtractedRelationship] = field(default_factory=dict)

    def entity(self, name: str, entity_type: str) -> str:
        key = _fold(name)
        if key not in self.entities:
            self.entities[key] = ExtractedEntity(name=name, entity_type=entity_type)
        return self.entities[key].name

    def relate(self, source: str, target: str, relation_type: str) -> None:
        if _fold(source) == _fold(target):
            return
        key = (_fold(source), _fold(target), relation_type)
        self.relationships.setdefault(
            key, ExtractedRelationship(source=source, target=target, relation_type=relation_type)
        )


class RuleBasedExtractor:
    """Low-quality, deterministic, offline EN/PT fallback extractor (no LLM).

    Use only when no LLM is configured; see the module docstring for what it can and
    cannot do. ``info.extractor == "rule-based"`` marks its facts for later re-extraction.
    """

    def __init__(self) -> None:
        self.info = ExtractorInfo(extractor="rule-based", model=None, prompt_version=RULES_VERSION)

    # -- public --------------------------------------------------------------------------

    def extract(self, request: ExtractionInput) -> ExtractionOutcome:
        started = time.perf_counter()
        try:
            extraction = self._extract(request)
            error = None
        except Exception as exc:  # noqa: BLE001 — fail-safe: never crash the caller
            extraction, error = Extraction(), f"rule-based extraction failed: {exc!r}"
        return ExtractionOutcome(
            extraction=extraction,
            llm_calls=0,
            error=error,
            raw_output=None,
            duration_ms=(time.perf_counter() - started) * 1000.0,
        )

    # -- internals -----------------------------------------------------------------------

    def _extract(self, request: ExtractionInput) -> Extraction:
        self_name = (request.speaker or "").strip() or SELF_FALLBACK
        out = _Collected()
        forms = self._known_forms(request.known_entities)
        for raw_sentence in _SENTENCE_SPLIT.split(request.text.strip()):
            if len(out.facts) >= request.max_facts:
                break
            sentence = " ".join(raw_sentence.split()).strip(" \"'“”‘’-–—")
            if not sentence:
                continue
            fact = self._sentence_fact(sentence, request, self_name, forms, out)
            if fact is not None:
                out.facts.append(fact)
        return Extraction(
            facts=out.facts[: max(request.max_facts, 0)],
            entities=list(out.entities.values()),
            relationships=list(out.relationships.values()),
        )

    @staticmethod
    def _known_forms(entities: list[KnownEntity]) -> list[tuple[re.Pattern[str], KnownEntity]]:
        """Surface forms of known entities, longest first, as word-bounded regexes."""
        pairs: list[tuple[str, KnownEntity]] = []
        for ent in entities:
            for form in [ent.display_name, *ent.aliases]:
                if len(form.strip()) >= 3:
                    pairs.append((form.strip(), ent))
        pairs.sort(key=lambda p: (-len(p[0]), p[0]))
        return [
            (re.compile(rf"(?<!\w){re.escape(form)}(?!\w)", re.IGNORECASE), ent)
            for form, ent in pairs
        ]

    def _names(
        self,
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
        for m in re.finditer(_NAME, sentence):
            tokens = list(re.finditer(r"\S+", m.group(0)))
            # Drop stopword tokens at the edges ("My", "The", trailing "I").
            while tokens and _strip_possessive(tokens[0].group(0)).lower() in _STOPWORDS:
                tokens.pop(0)
            while (
                len(tokens) > 1
                and _strip_possessive(tokens[-1].group(0)).lower() in _STOPWORDS
                and tokens[-2].group(0).lower() not in _CONNECTORS
            ) or (len(tokens) == 1 and _strip_possessive(tokens[0].group(0)).lower() in _STOPWORDS):
                tokens.pop()
            if not tokens:
                continue
            start = m.start() + tokens[0].start()
            end = m.start() + tokens[-1].end()
            name = _strip_possessive(sentence[start:end])
            if not free(start, end) or _fold(name) == _fold(self_name):
                continue
            if start == 0 and not self._initial_is_name(sentence, name, end):
                continue
            entity_type = self._guess_type(sentence, start)
            taken.append((start, end))
            found.append((name, entity_type, start))
        found.sort(key=lambda item: item[2])
        return found

    @staticmethod
    def _initial_is_name(sentence: str, name: str, end: int) -> bool:
        """A sentence-initial capitalised word is a name only with some evidence."""
        if " " in name:
            return True  # multi-word capitalised sequence ("Porto Alegre is lovely")
        if name.lower().endswith(("ing", "ndo")):
            return False
        following = sentence[end:].lstrip(" ,")
        if re.match(r"['’]s\b", sentence[end:]):
            return True
        next_word = following.split(" ", 1)[0].lower() if following else ""
        return next_word in _NAME_FOLLOWERS

    @staticmethod
    def _guess_type(sentence: str, start: int) -> str:
        before = sentence[:start].rstrip().rsplit(" ", 1)[-1].lower() if start else ""
        if before in {"in", "to", "from", "em", "para", "pra", "de", "near", "visited", "visitei"}:
            return "place"
        if before in {"at", "na", "no", "pela", "pelo", "joined"}:
            return "organization"
        return "person"

    def _subject_before(
        self, sentence: str, pos: int, names: list[tuple[str, str, int]], first_person: bool
    ) -> str | None:
        """Who a pattern matched at ``pos`` is about: the name right before it, or self."""
        prefix = sentence[:pos]
        for name, _, start in reversed(names):
            if start < pos and re.fullmatch(
                rf"\s*(?:{_WORD}\s+){{0,2}}", prefix[start + len(name) :]
            ):
                return name
        if re.search(
            r"\b(?:my|our|his|her|their|minha|meu|nossa|nosso|sua|seu)\s+\w+(?:\s+\w+)?\s*$",
            prefix,
            re.IGNORECASE,
        ):
            return ""  # "my sister lives in ...": about someone unnamed
        if re.search(
            r"(?:\bI\b|\bI['’]m\b|\bwe\b|\beu\b|\bnós\b)\s*(?:\w+\s+){0,2}$", prefix, re.IGNORECASE
        ) or re.search(r"\bI\s*(?:\w+\s+){0,2}$", prefix):
            return None  # self
        if first_person:
            return None
        return ""  # unknown subject (he/she/they...): no attribute

    def _attribute_match(
        self,
        sentence: str,
        names: list[tuple[str, str, int]],
        first_person: bool,
        self_name: str,
    ) -> tuple[_Pattern, str, str] | None:
        """The earliest attribute statement in the sentence: (pattern, subject, value)."""
        best: tuple[int, _Pattern, str, str] | None = None
        for pattern in _ATTRIBUTE_PATTERNS:
            for m in pattern.regex.finditer(sentence):
                if best is not None and m.start() >= best[0]:
                    break
                value = m.group("obj").strip()
                if pattern.attribute == "job_title":
                    value = _job_title(value) or ""
                    if not value:
                        continue
                who = self._subject_before(sentence, m.start(), names, first_person)
                if who == "":
                    continue
                best = (m.start(), pattern, self_name if who is None else who, value)
                break
        return None if best is None else best[1:]

    def _sentence_fact(
        self,
        sentence: str,
        request: ExtractionInput,
        self_name: str,
        forms: list[tuple[re.Pattern[str], KnownEntity]],
        out: _Collected,
    ) -> ExtractedFact | None:
        if sentence.endswith("?") or _is_greeting(sentence):
            return None
        short = len(_TOKEN.findall(sentence)) < 3
        first_person = bool(_FIRST_PERSON_I.search(sentence) or _FIRST_PERSON.search(sentence))
        names = self._names(sentence, self_name, forms)
        if not first_person and not names:
            return None

        subject: str | None = self_name if first_person else None
        attribute: str | None = None
        category: str | None = None
        action = "NEW"
        target: str | None = None
        confidence = ConfidenceLevel.weak_inference
        obj_name: str | None = None
        obj_type: str | None = None
        relation: str | None = None

        negated = next((attr for attr, rx in _NEGATIONS if rx.search(sentence)), None)
        if negated:
            # A negation is a RETRACT only of a fact memory actually holds; otherwise it is
            # kept as a plain fact *without* the attribute (it must not supersede anything).
            subj_name = self_name if first_person else (names[0][0] if names else None)
            known = self._known_attribute_fact(request, subj_name, negated) if subj_name else None
            if known is not None:
                action, target, subject = "RETRACT", known.fact_id, subj_name
                attribute = negated
                confidence = ConfidenceLevel.explicit_statement
            category = "work" if negated == "workplace" else "personal"
        else:
            found = self._attribute_match(sentence, names, first_person, self_name)
            if found is not None:
                pattern, subject, value = found
                attribute, category = pattern.attribute, pattern.category
                confidence = ConfidenceLevel.explicit_statement
                if pattern.obj_type:
                    obj_name = _leading_name(value)
                    obj_type, relation = pattern.obj_type, pattern.relation
                known = (
                    self._known_attribute_fact(request, subject, attribute) if attribute else None
                )
                same_value = known is not None and _fold(obj_name or value) in _fold(known.text)
                if known is not None and not same_value:
                    action, target = "UPDATE", known.fact_id

        related = False
        for rx in _REL_PATTERNS:
            for m in rx.finditer(sentence):
                other = _leading_name(m.group("name"))
                if other is None or _fold(other) == _fold(self_name):
                    continue
                rel_type = _RELATIONS[m.group("rel").lower()]
                other = out.entity(self._canonical(other, forms), "person")
                out.relate(out.entity(self_name, "person"), other, rel_type)
                related = True
        if related:
            category = category or "relationship"
            confidence = ConfidenceLevel.explicit_statement
            subject = subject or self_name

        if short and attribute is None and not related:
            return None  # "Sou casado." is worth keeping; "I see." is not
        if subject is None:
            subject = names[0][0]
        subject = out.entity(self._canonical(subject, forms), self._type_of(subject, names))
        if obj_name:
            obj_type = self._known_type(obj_name, forms) or obj_type or "other"
            obj_name = out.entity(self._canonical(obj_name, forms), obj_type)
            if relation:
                out.relate(subject, obj_name, relation)
        mentions: list[str] = []
        if first_person and _fold(subject) != _fold(self_name):
            mentions.append(out.entity(self_name, "person"))
        for name, entity_type, _ in names:
            canonical = out.entity(self._canonical(name, forms), entity_type)
            if _fold(canonical) != _fold(subject) and canonical not in mentions:
                mentions.append(canonical)
        if obj_name and obj_name not in mentions and _fold(obj_name) != _fold(subject):
            mentions.append(obj_name)

        text = _rewrite_first_person(sentence, request.speaker if subject == self_name else None)
        if category is None:
            category = next((cat for cat, rx in _CATEGORY_HINTS if rx.search(sentence)), "personal")
        return ExtractedFact(
            text=text[:2000],
            action=action,  # type: ignore[arg-type]
            target_fact_id=target,
            entity=subject,
            mentions=mentions,
            attribute_key=attribute,
            category=category,
            confidence_level=confidence,
        )

    @staticmethod
    def _canonical(name: str, forms: list[tuple[re.Pattern[str], KnownEntity]]) -> str:
        for regex, ent in forms:
            if regex.fullmatch(name):
                return ent.display_name
        return name

    @staticmethod
    def _known_type(name: str, forms: list[tuple[re.Pattern[str], KnownEntity]]) -> str | None:
        for regex, ent in forms:
            if regex.fullmatch(name):
                return ent.entity_type
        return None

    @staticmethod
    def _type_of(name: str, names: list[tuple[str, str, int]]) -> str:
        for other, entity_type, _ in names:
            if _fold(other) == _fold(name):
                return entity_type
        return "person"

    @staticmethod
    def _keys_of(request: ExtractionInput, name: str) -> list[str]:
        """Entity keys a name may stand for: known entities it names, and its slug."""
        folded = _fold(name)
        keys = [
            ent.entity_key
            for ent in request.known_entities
            if folded in {_fold(ent.display_name), *(_fold(a) for a in ent.aliases)}
        ]
        slug = _slug(name)
        for fact in request.known_facts:
            if fact.entity_key.split(":", 1)[-1] == slug and fact.entity_key not in keys:
                keys.append(fact.entity_key)
        return keys

    def _known_attribute_fact(
        self, request: ExtractionInput, name: str, attribute: str
    ) -> KnownFact | None:
        if attribute not in _SINGLE_VALUED:
            return None
        keys = self._keys_of(request, name)
        for fact in request.known_facts:
            if fact.attribute_key == attribute and fact.entity_key in keys:
                return fact
        return None
