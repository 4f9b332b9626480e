"""Query decomposition (issue 9 lever (b), ADR-0021): a question that names two people
("What do Caroline and Melanie both like?") or joins two questions ("Where did X go and what
did she buy?") is also asked as its parts, and the parts' fused rankings are fused again with
the whole question's by reciprocal rank.

Why: one embedding and one BM25 ranking of the whole question favour units that match both
halves at once, which multi-hop evidence (one turn per person, per session) rarely does; each
part finds its own half, and RRF keeps what the whole question ranks well. Deterministic,
EN + PT, no LLM; at most ``MAX_PARTS`` parts, so a call costs at most that many extra passes
and only for questions that split. ``sub_queries`` is pure; ``fuse_runs`` is pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from engramdb.services.retrieve.fusion import EVENT, FACT, Fused, without_repeats
from engramdb.services.retrieve.rank import Candidate, EventCandidate

MAX_PARTS = 3
MIN_PART_WORDS = 3
# capitalised words that are not names (sentence starts, pronouns, question words)
_NOT_NAMES = frozenset(
    ["i", "what", "who", "whom", "whose", "when", "where", "why", "how", "which", "did", "do", "does", "is", "are", "was", "were", "the", "a", "an", "o", "a", "os", "as", "que", "quem", "quando", "onde", "porque", "como", "qual", "quais", "eu", "ele", "ela"]
)
_NAME = r"[A-ZÀ-Ý][\w'’-]+"
_PAIR = re.compile(rf"\b({_NAME})\s*(?:,\s*)?\s+(?:and|&|e)\s+(?:(?:o|a)\s+)?({_NAME})\b")
_BOTH = re.compile(r"\b(?:both|ambos|ambas|each|together|in common|em comum|juntos|juntas)\b", re.IGNORECASE)
_QUESTION_WORDS = (
    r"what|when|where|who|whom|why|how|which|did|does|do|is|are|was|were|has|have|"
    r"o que|quando|onde|quem|porque|por que|como|qual|quais"
)
_CLAUSE = re.compile(rf"(?:\?\s+|;\s*|,?\s+(?:and|e)\s+(?=(?:{_QUESTION_WORDS})\b))", re.IGNORECASE)


def _words(text: str) -> int:
    return len(re.findall(r"\w+", text))


def _tidy(text: str) -> str:
    return re.sub(r"\s+([?!.,])", r"\1", re.sub(r"\s{2,}", " ", text)).strip(" ,;")


def _name_parts(query: str) -> list[str]:
    match = _PAIR.search(query)
    if match is None:
        return []
    first, second = match.group(1), match.group(2)
    if first.lower() in _NOT_NAMES or second.lower() in _NOT_NAMES:
        return []
    out = []
    for name in (first, second):
        part = query[: match.start()] + name + query[match.end():]
        out.append(_tidy(_BOTH.sub(" ", part)))
    return out


def sub_queries(query: str) -> list[str]:
    """The parts of ``query`` worth asking on their own, or ``[]`` when it does not split.
    Two questions joined ("…? …", "…; …", "… and what …") split into clauses; a pair of
    names ("X and Y") into one question per name. Parts under ``MIN_PART_WORDS`` words or
    equal to the query are dropped; at most ``MAX_PARTS``."""
    query = query.strip()
    parts = [_tidy(p) for p in _CLAUSE.split(query) if p and _tidy(p)]
    if len(parts) < 2:
        parts = _name_parts(query)
    seen: set[str] = set()
    out: list[str] = []
    for part in parts:
        key = part.lower()
        if _words(part) < MIN_PART_WORDS or key == query.lower() or key in seen:
            continue
        seen.add(key)
        out.append(part)
    return out[:MAX_PARTS] if len(out) >= 2 else []


Run = tuple[Sequence[Candidate], Sequence[EventCandidate]]


def _order(run: Run) -> list[tuple[str, str]]:
    """A run's facts and turns as one ranking, by the score each carries (facts first on a tie)."""
    facts, events = run
    units = [(c.final, 0, FACT, c.fact_id) for c in facts] + [(e.final, 1, EVENT, e.message_id) for e in events]
    units.sort(key=lambda u: (-u[0], u[1], u[3]))
    return [(kind, uid) for _, _, kind, uid in units]


def fuse_runs(runs: Sequence[Run], k: float) -> tuple[list[Candidate], list[EventCandidate]]:
    """The whole question's run first, then its parts': each run's ranking counts once
    (``1 / (k + rank)``), scores divided by the best possible so they stay in (0, 1]; a unit
    takes the candidate object of the first run that has it; repeats are dropped as in
    ``fusion.without_repeats``."""
    by_fact: dict[str, Candidate] = {}
    by_event: dict[str, EventCandidate] = {}
    for facts, events in runs:
        for c in facts:
            by_fact.setdefault(c.fact_id, c)
        for e in events:
            by_event.setdefault(e.message_id, e)
    units: dict[tuple[str, str], Fused] = {}
    for n, run in enumerate(runs):
        for rank, (kind, uid) in enumerate(_order(run), start=1):
            unit = units.setdefault((kind, uid), Fused(kind, uid))
            unit.score += 1.0 / (k + rank)
            unit.ranks[f"run{n}"] = rank
    fused = sorted(units.values(), key=lambda u: (-u.score, u.kind != FACT, u.unit_id))
    sources: Mapping[str, Sequence[str]] = {fid: c.row.source_message_ids for fid, c in by_fact.items()}
    scale = len(runs) / (k + 1) if runs else 1.0
    out_facts: list[Candidate] = []
    out_events: list[EventCandidate] = []
    for unit in without_repeats(fused, sources):
        score = round(unit.score / scale, 9)
        if unit.kind == FACT:
            cand = by_fact[unit.unit_id]
            cand.formula = cand.final = score
            cand.scores["rrf"] = score
            out_facts.append(cand)
        else:
            ev = by_event[unit.unit_id]
            ev.formula = ev.final = score
            ev.scores["rrf"] = score
            out_events.append(ev)
    return out_facts, out_events
