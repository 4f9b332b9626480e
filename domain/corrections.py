"""Is this message the user correcting what memory holds? ("actually…", "não, na verdade…")

Why a cue list and not the extractor's word: an UPDATE also happens when life changes ("I
moved to Lisbon"), which is news, not a correction. A correction says memory was WRONG, and
users say so in a handful of ways; those facts matter more to them (importance, ADR-0019).
Pure and deterministic, so re-deciding a message after a conflict notes the same thing.
"""

from __future__ import annotations

import re

from engramdb.domain.decisions import DecisionReport

# Cue phrases (English, Portuguese, Spanish), matched as words at the start of a clause.
_CUES = (
    r"actually", r"in fact", r"correction", r"to correct", r"i meant", r"i mean",
    r"that'?s (?:not right|wrong|incorrect)", r"not anymore", r"no longer",
    r"(?:no|nope|wait),? (?:it'?s|it is|i|my|that)",
    r"na verdade", r"n[ãa]o,? na verdade", r"corrigindo", r"quer dizer", r"eu quis dizer",
    r"en realidad", r"de hecho",
)
_CUE_RE = re.compile(r"(?:^|[.!?;,:]\s*|\b)(" + "|".join(_CUES) + r")\b", re.IGNORECASE)


def correction_cue(text: str) -> str | None:
    """The cue phrase (lower-cased) if ``text`` reads as a correction, else None."""
    match = _CUE_RE.search(text or "")
    return match.group(1).lower() if match else None


def note_corrections(memory: object, report: DecisionReport, text: str, message_id: str) -> int:
    """After reconciliation: mark each UPDATE of this message as a correction when the
    message carries a cue. Returns how many were noted."""
    cue = correction_cue(text)
    if cue is None:
        return 0
    noted = 0
    for decision in report.decisions:
        if decision.kind == "UPDATE" and decision.fact_id and decision.target_fact_id:
            memory.note_correction(  # type: ignore[attr-defined]
                decision.fact_id, decision.target_fact_id, message_id, cue
            )
            noted += 1
    return noted
