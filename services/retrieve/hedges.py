"""Hedge words out of the keyword query (issue 9 lever (d), ADR-0021; on by default).

Why: open-domain questions are speculative — "Would Caroline *likely* have Dr. Seuss books?",
"What *might* John's financial status be?", "*Would* Melanie *be considered* an ally?". The
hedges carry no content, yet BM25 weighs them like any rare word and ranks turns that happen
to say "likely" or "considered" above the ones about the subject. They are dropped from the
text BM25 scores (facts and turns); the embedding still sees the whole question. EN + PT;
whole words only, case-insensitive ("may" is kept: it is also a month); a question made only of hedges is left as it is. Pure.
"""

from __future__ import annotations

import re

_HEDGE_TEXT = (
    # EN: modals, likelihood, opinion framing
    "would could might should likely unlikely probably possibly perhaps maybe "
    "considered consider think thinks guess suppose presumably potentially kind sort "
    # PT
    "seria seriam poderia poderiam deveria provavelmente possivelmente talvez "
    "considerado considerada considerados consideradas provável provavel"
)
HEDGES = frozenset(_HEDGE_TEXT.split())
_WORD = re.compile(r"[\w'’-]+", re.UNICODE)


def without_hedges(query: str) -> str:
    """``query`` with its hedge words removed (the rest kept verbatim, in order)."""
    kept = _WORD.sub(lambda m: "" if m.group(0).lower() in HEDGES else m.group(0), query)
    kept = re.sub(r"\s{2,}", " ", kept).strip()
    return kept if _WORD.search(kept) else query
