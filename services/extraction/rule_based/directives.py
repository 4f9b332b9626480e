"""Procedural directives without an LLM (EN + PT, issue 26, ADR-0045).

A directive is a sentence telling the assistant how to behave: "always answer in
Portuguese", "never suggest meetings before 9 am", "from now on keep it short", "please
stop calling me sir", "don't use emojis", "prefiro que você seja direto", "sempre responda
em português", "nunca marque reuniões antes das 9h", "a partir de agora…", "pare de…".
Recognised by how the sentence *opens* (an imperative or a request to "you"), after an
optional "please / and / also / actually / por favor / e / também". Kept in the user's own
words (the offline path does not translate). A few openings that are small talk, not
instructions ("don't worry", "never mind", "não sei") are not directives.

Its ``topic`` decides what it supersedes: a small keyword map (language, answer length,
tone, form of address, emojis, scheduling, format); a directive matching none gets a topic
of its own words, so unrelated directives coexist instead of replacing one another. A
correction ("actually, long answers are fine", "na verdade, respostas longas estão ok") is
recognised when it names a topic and says it is fine: it supersedes that topic's directive.

Also used on the LLM path as a backstop (``llm_postprocess``): a small model misses most
directives; a sentence this module recognises is not lost because of it.
"""

from __future__ import annotations

import re

from engramdb.domain.directives import ExtractedDirective

_LEAD = r"^(?:(?:please|pls|and|also|oh|ok|okay|so|por favor|e|também|ah)[,\s]+)*"
_OPENINGS = re.compile(
    _LEAD
    + r"(?:"
    r"always|never|from now on|going forward|in the future|"
    r"(?:please\s+)?stop\s+\w+ing|do not|don['’]t|"
    r"(?:i['’]?d like|i want|i need|i prefer|i['’]?d prefer)\s+(?:you|that you|for you)\b|"
    r"(?:keep|make)\s+(?:your\s+|the\s+)?(?:answers?|replies|responses|messages?)\b|"
    r"(?:keep|make)\s+it\s+(?:short|brief|concise|simple)\b|"
    r"(?:answer|reply|respond|write|talk|speak)\s+(?:to me\s+)?(?:in|with|only|briefly|shortly)\b|"
    r"call me\b|"
    r"sempre|nunca|a partir de agora|daqui (?:pra|para) frente|de agora em diante|"
    r"pare de|para de|deixe de|"
    r"(?:prefiro|quero|gostaria)\s+que\s+(?:você|voce|vc|tu)\b|"
    r"não\s+(?:me\s+)?(?:chame|mande|envie|responda|use|fale|escreva|sugira|marque|diga|faça)\b|"
    r"(?:responda|fale|escreva|seja|use|me chame)\b"
    r")",
    re.IGNORECASE,
)
_SMALL_TALK = re.compile(
    _LEAD + r"(?:don['’]t worry|do not worry|never mind|never forget|don['’]t mention it|keep it up|"
    r"don['’]t forget|do not forget|não (?:se )?esque(?:ça|ce)|"
    r"don['’]t know|always happy|never thought|never been|always been|never had|always had|"
    r"nunca (?:pensei|fui|tive|vi)|sempre (?:fui|tive|gostei|quis))\b",
    re.IGNORECASE,
)
_CORRECTION = re.compile(
    r"^(?:actually|on second thought|na verdade|pensando bem)[,\s]+.*\b"
    r"(?:is|are|would be|é|são|estão|está)\s+(?:fine|ok|okay|good|alright|bom|bem|boas?|ótimas?)\b",
    re.IGNORECASE,
)
TOPICS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("language", re.compile(r"\b(?:portuguese|english|spanish|french|language|português|"
                            r"inglês|espanhol|idioma|língua)\b", re.I)),
    ("answer_length", re.compile(r"\b(?:short|long|brief|concise|length|verbose|curt[oa]s?|"
                                 r"long[oa]s?|breve|resumid[oa]s?|tamanho)\b", re.I)),
    ("emojis", re.compile(r"\bemojis?\b", re.I)),
    ("form_of_address", re.compile(r"\b(?:call me|me chame|me chamar|sir|madam|senhora?)\b", re.I)),
    ("scheduling", re.compile(r"\b(?:meetings?|reuni(?:ão|ões)|calls?|schedul\w*|agend\w*|"
                              r"\d{1,2}\s*(?:am|pm|h)\b)", re.I)),
    ("tone", re.compile(r"\b(?:formal|informal|casual|direct|direto|direta|polite|educad[oa]|"
                        r"tone|tom)\b", re.I)),
    ("format", re.compile(r"\b(?:bullet|list|lista|markdown|table|tabela|format\w*)\b", re.I)),
)
_WORD = re.compile(r"[^\W\d_]{3,}", re.UNICODE)
_STOP = frozenset(["please", "always", "never", "from", "now", "stop", "don't", "the", "you", "your", "and", "que", "você", "voce", "sempre", "nunca", "partir", "agora", "pare", "por", "favor"])


def topic_of(sentence: str) -> str:
    """The directive's topic: a known one, else its first content words (its own topic)."""
    for name, pattern in TOPICS:
        if pattern.search(sentence):
            return name
    words = [w.lower() for w in _WORD.findall(sentence) if w.lower() not in _STOP]
    return "_".join(words[:3]) or "general"


def directive_in(sentence: str) -> ExtractedDirective | None:
    """The directive ``sentence`` gives, or None (most sentences)."""
    text = sentence.strip()
    if not text or text.endswith("?"):
        return None
    if _CORRECTION.search(text):
        topic = topic_of(text)
        if topic in {name for name, _ in TOPICS}:
            return ExtractedDirective(text=text, topic=topic)
        return None
    if _SMALL_TALK.search(text) or not _OPENINGS.search(text):
        return None
    return ExtractedDirective(text=text, topic=topic_of(text))
