"""Word-level text helpers shared by the read side (planner, keyword signal) and the write
side (pre-retrieval, rule-based extractor, context budgets).

Why one home: each of these ideas used to be written out in two or three places, which drift
silently. Where the copies *had already* drifted (different stop words, greeting rules, word
shapes), the variants are kept side by side under names that say who uses them, because
unifying them would change extraction output or retrieval results (LoCoMo must stay
identical). Pure Python: no other layer is imported.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterator

# --------------------------------------------------------------------------- folding

_SPACES = re.compile(r"\s+")


def match_key(text: str) -> str:
    """Lower-case, accent-free, single-spaced: the form two names or texts are compared in
    (not an event fold: ``domain/fold.py`` is that)."""
    decomposed = unicodedata.normalize("NFKD", text)
    ascii_ish = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return _SPACES.sub(" ", ascii_ish.casefold()).strip()


def fold_case(text: str) -> str:
    """Case-fold and trim only, accents kept: the rule-based extractor's comparison form
    ("José" and "Jose" stay distinct there). Not :func:`match_key`; swapping them would change
    which names the extractor merges."""
    return text.casefold().strip()


# --------------------------------------------------------------------------- word shapes

WORD_RE = re.compile(r"\w+", re.UNICODE)
"""Plain word tokens: the planner, the keyword signal and the hash test embedder."""

CONTRACTED_WORD_RE = re.compile(r"\w+(?:['’-]\w+)*", re.UNICODE)
"""Words keeping inner apostrophes/hyphens ("o'brien", "well-known"): pre-retrieval's surface
names, so a name is matched whole."""

NAME_WORD_PATTERN = r"[\w’'-]+"
"""The rule-based extractor's word (apostrophes and hyphens anywhere); a pattern string
because it is also spliced into larger regexes."""

NAME_WORD_RE = re.compile(NAME_WORD_PATTERN)


# --------------------------------------------------------------------------- n-grams


def ngram_spans(count: int, max_n: int, *, longest_first: bool = False) -> Iterator[tuple[int, int]]:
    """``(start, end)`` spans of every 1..``max_n``-gram over ``count`` tokens, left to right
    within a size; sizes ascending, or descending with ``longest_first`` (the planner's
    longest-match order)."""
    sizes = range(min(max_n, count), 0, -1) if longest_first else range(1, max_n + 1)
    for size in sizes:
        for start in range(count - size + 1):
            yield start, start + size


# --------------------------------------------------------------------------- token budgets


def approx_tokens(text: str) -> int:
    """About four characters per token, rounded up: budgets need a bound that is fast and the
    same everywhere (LLM prompt context, pre-retrieval, the formatted retrieve context)."""
    return math.ceil(len(text) / 4)


# --------------------------------------------------------------------------- stop words

# Read side: words that never name an entity and carry no keyword signal (EN + PT, folded).
# The planner's n-grams and the keyword signal compare folded words against it.
_QUERY_STOPWORD_TEXT = """
    a about above after again all also am an and any are as at be because been before being
    between both but by can could did do does doing done down during each few for from had has
    have having he her here hers him his how i if in into is it its itself just know like me
    more most my myself no nor not now of off on once only or other our ours out over own same
    she should so some such than that the their theirs them then there these they this those
    through to too under until up very was we were what when where which while who whom why
    will with would you your yours tell told say said does did get got thing things anything
    something everything happened happen
    o os as um uma uns umas de do da dos das no na nos nas em por para pra pro com sem sobre
    que quem qual quais quando onde como porque por que se nao sim mais menos muito muita eu tu
    ele ela nos vos eles elas me te lhe meu minha meus minhas seu sua seus suas nosso nossa este
    esta isto esse essa isso aquele aquela aquilo foi era sao ser estar esta estao tem ter tinha
    ja ainda tambem so ao aos e ou mas sabe voce voces vc conte conta tudo aconteceu
"""
STOPWORDS_QUERY = frozenset(_QUERY_STOPWORD_TEXT.split())

# Write side: words the rule-based extractor never takes as a name (EN + PT with accents, plus
# weekdays, months, nationalities). Larger and unfolded, unlike STOPWORDS_QUERY.
_EXTRACTION_STOPWORD_TEXT = """
    i i'm i’m i've i'd i'll me my mine myself we we're our ours us you you're your yours he he's
    him his she she's her hers it it's its they they're them their this that these those there
    here the a an and or but so if then than because when where what which who whom whose why
    how yes no not oh ah ok okay well hey hi hello thanks thank please sorry wow yeah yep nope
    also just still really very maybe actually anyway btw lol haha good great nice cool awesome
    morning evening night today tomorrow yesterday tonight everyone everybody everything
    someone somebody something anyone anything nothing nobody none all some many much more
    most other another each every both either neither last next first after before during
    since until while though although however also as at by for from in into of on onto to
    with without about over under again once always never sometimes often usually recently
    monday tuesday wednesday thursday friday saturday sunday january february march april may
    june july august september october november december christmas easter english portuguese
    spanish french german brazilian american mom dad mum god lord tv ai
    eu meu minha meus minhas me mim comigo nós nos nosso nossa nossos nossas você vocês seu
    sua seus suas ele ela eles elas dele dela deles delas isso isto aquilo esse essa este esta
    aquele aquela o a os as um uma uns umas e ou mas porque quando onde que quem qual quais
    como por para pra pro com sem sobre de da do das dos em no na nos nas ao aos à às sim não
    nao oi olá ola obrigado obrigada valeu bom boa dia tarde noite hoje amanhã ontem tudo todo
    toda todos todas nada ninguém alguém algum alguma muito muita muitos muitas mais menos
    também tambem já ainda agora então entao depois antes sempre nunca às vezes acho talvez
    natal páscoa mãe pai
"""
STOPWORDS_EXTRACTION = frozenset(_EXTRACTION_STOPWORD_TEXT.split())

# --------------------------------------------------------------------------- small talk

# Read side. Small talk, EN + PT (folded: lower-case, no accents). A query is small talk when it
# is made only of these phrases (plus fillers), e.g. "oi, tudo bem?", "thanks!", "bom dia pessoal".
_GREETING_PHRASES = sorted(
    {
        "hi", "hello", "hey", "hiya", "yo", "howdy", "sup", "whats up", "what s up", "good morning",
        "good afternoon", "good evening", "good night", "morning", "evening", "thanks",
        "thank you", "thx", "ty", "cheers", "ok", "okay", "k", "cool", "nice", "great", "bye",
        "goodbye", "see you", "see ya", "how are you", "how are you doing", "how s it going",
        "hows it going", "how is it going", "lol", "haha", "oi", "ola", "opa", "eae", "e ai",
        "eai", "e aí", "bom dia", "boa tarde", "boa noite", "tudo bem", "tudo bom", "tudo certo",
        "beleza", "blz", "obrigado", "obrigada", "brigado", "valeu", "vlw", "tchau", "ate mais",
        "ate logo", "falou", "como vai", "como voce esta", "como vc esta", "kkk", "kkkk", "rs",
        "legal", "massa", "show", "de nada", "you re welcome", "no problem", "np", "sim", "yes",
        "no", "nao",
    },
    key=lambda p: -len(p.split()),
)
_GREETING_FILLERS: frozenset[str] = frozenset({"there", "everyone", "all", "guys", "folks", "friend", "pessoal", "galera", "amigo", "amiga", "tudo", "a", "e", "so", "very", "much", "muito"})


def is_small_talk_query(tokens: list[str]) -> bool:
    """The planner's rule: at most 8 folded tokens, all covered by greeting phrases or
    fillers, with at least one phrase. Such a query never reaches the database."""
    if not tokens or len(tokens) > 8:
        return False
    i, n = 0, len(tokens)
    matched = False
    while i < n:
        for phrase in _GREETING_PHRASES:
            words = phrase.split()
            if tokens[i : i + len(words)] == words:
                i += len(words)
                matched = True
                break
        else:
            if tokens[i] in _GREETING_FILLERS:
                i += 1
                continue
            return False
    return matched


# Write side: greetings the rule-based extractor skips (accents kept, see fold_case).
_SENTENCE_GREETINGS = (
    "hi",
    "hey",
    "hello",
    "hiya",
    "yo",
    "good morning",
    "good afternoon",
    "good evening",
    "good night",
    "thanks",
    "thank you",
    "thx",
    "bye",
    "goodbye",
    "see you",
    "oi",
    "olá",
    "ola",
    "e aí",
    "bom dia",
    "boa tarde",
    "boa noite",
    "obrigado",
    "obrigada",
    "valeu",
    "tchau",
    "até mais",
    "ok",
    "okay",
    "lol",
    "haha",
)


def is_greeting_sentence(sentence: str) -> bool:
    """The rule-based extractor's rule: the sentence *is* a greeting, or starts with one and
    has at most four words ("hi there Ana"). Looser than :func:`is_small_talk_query` on
    purpose: it only decides that a sentence holds no fact."""
    low = re.sub(r"[^\w\s']", " ", fold_case(sentence))
    low = " ".join(low.split())
    for greeting in _SENTENCE_GREETINGS:
        if low == greeting or (low.startswith(greeting + " ") and len(low.split()) <= 4):
            return True
    return False
