"""A small EN + PT emotion lexicon for the offline extractor (issue 26).

Why so small, and labelled: without an LLM the emotion of a message is guessed from a few
dozen words per emotion; it misses irony, negation ("not happy") and most of what is not
said in those words. So it records an emotion only when a word of the list is there —
otherwise nothing, never a made-up ``neutral`` — and every emotion it records carries
``detector="lexicon"``, so nobody mistakes it for the LLM's reading.
"""

from __future__ import annotations

import re

from engramdb.domain.emotion import ExtractedEmotion

_LEXICON: dict[str, str] = {
    "joy": r"happy|glad|excited|thrilled|delighted|joy(?:ful)?|love[ds]?|loving|great|awesome|"
           r"amazing|wonderful|fantastic|proud|grateful|thankful|yay|"
           r"feliz(?:es)?|alegr\w*|animad[oa]s?|ótim[oa]s?|adorei|amei|orgulhos[oa]s?|grat[oa]s?|"
           r"maravilhos[oa]s?|incrível",
    "sadness": r"sad|unhappy|upset|lonely|depressed|heartbroken|miss(?:ed|ing)?|cry(?:ing)?|"
               r"cried|grief|grieving|lost my|"
               r"triste(?:s)?|saudades?|chorei|chorando|sozinh[oa]s?|deprimid[oa]s?|arrasad[oa]s?",
    "anger": r"angry|furious|mad|annoyed|irritated|hate[ds]?|frustrated|pissed|outraged|"
             r"raiva|brav[oa]s?|irritad[oa]s?|odeio|odiei|furios[oa]s?|frustrad[oa]s?",
    "fear": r"scared|afraid|anxious|worried|nervous|terrified|frightened|panic\w*|"
            r"medo|preocupad[oa]s?|ansios[oa]s?|nervos[oa]s?|apavorad[oa]s?",
    "surprise": r"surprised|surprising|shocked|unexpected|can['’]t believe|wow|whoa|"
                r"surpres[oa]s?|chocad[oa]s?|nossa|uau|não acredito",
    "disgust": r"disgusting|disgusted|gross|revolting|nojo|nojent[oa]s?|repugnante",
}
_PATTERNS = {name: re.compile(rf"\b(?:{words})\b", re.IGNORECASE) for name, words in _LEXICON.items()}
_INTENSIFIERS = re.compile(r"\b(?:so|very|really|super|extremely|totally|muito|demais|"
                           r"tão|super)\b|!", re.IGNORECASE)


def lexicon_emotion(text: str) -> ExtractedEmotion | None:
    """The most frequent emotion word's emotion, or None when the text has none."""
    counts = {name: len(p.findall(text)) for name, p in _PATTERNS.items()}
    best = max(counts, key=lambda k: counts[k])
    hits = counts[best]
    if hits == 0:
        return None
    strength = hits + len(_INTENSIFIERS.findall(text))
    intensity = "high" if strength >= 3 else "medium" if strength == 2 else "low"
    return ExtractedEmotion(primary=best, intensity=intensity, detector="lexicon")  # type: ignore[arg-type]
