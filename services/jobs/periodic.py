"""Consolidation's ``periodic`` detector (ADR-0030): one activity recurring at regular intervals.

"Ana goes to yoga" said on three Tuesdays in a row is a habit, not three facts. The
occurrences of an activity are the days of the turns that stated it: a fact's source
messages (a repetition the write pipeline took as a NOOP appends its turn to the fact, so
one fact can carry all its occurrences) plus similar facts of the same subject (the content
words of their texts overlap by at least ``SIMILARITY`` Jaccard: "went to yoga class" /
"had a yoga class again"). At least ``MIN_OCCURRENCES`` (3) distinct days whose gaps are
regular — every gap within ``TOLERANCE`` (25 %, at least a day) of the median gap, the
median at least a day — make a pattern:

- ``Ana: "Goes to yoga" — every Tuesday (4 times, 2025-03-04 to 2025-03-25)`` when the median
  gap is a week and all occurrences share the weekday;
- ``Ana: "Visits her mother" — about every 14 days (3 times, ...)`` otherwise.

Pure and deterministic (sorted inputs, no clock but the dates given): the id hashes the
subject and the group's first fact, so a new occurrence updates the pattern instead of
making another. Texts are English; facts are quoted in their own language.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import date, datetime
from typing import Any

from engramdb.domain.text import STOPWORDS_EXTRACTION, STOPWORDS_QUERY, fold_case

MIN_OCCURRENCES = 3
SIMILARITY = 0.5
TOLERANCE = 0.25
MAX_EVIDENCE = 10
_WORD = re.compile(r"[^\W\d_]{3,}")
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
# words that date an occurrence rather than name the activity
_TIME_WORD_TEXT = """today yesterday tonight again week weekend weeks month months year day days
    time times every each last next this recently lately hoje ontem semana mes dia vez vezes"""
_TIME_WORDS = frozenset(_TIME_WORD_TEXT.split())


def signature(text: str, subject_words: frozenset[str] = frozenset()) -> frozenset[str]:
    """The content words naming the activity (folded, stop/time words and the subject's
    name left out)."""
    words = {fold_case(w) for w in _WORD.findall(text)}
    return frozenset(w for w in words if w not in STOPWORDS_QUERY and w not in STOPWORDS_EXTRACTION
                     and w not in _TIME_WORDS and w not in subject_words)


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


def regular(days: Sequence[date]) -> float | None:
    """The median gap in days when the occurrences are regular, else None."""
    if len(days) < MIN_OCCURRENCES:
        return None
    gaps = [(b - a).days for a, b in zip(days, days[1:], strict=False)]
    median = statistics.median(gaps)
    if median < 1:
        return None
    slack = max(1.0, TOLERANCE * median)
    return float(median) if all(abs(g - median) <= slack for g in gaps) else None


def describe(name: str, text: str, days: Sequence[date], gap: float) -> str:
    span = f"{len(days)} times, {days[0].isoformat()} to {days[-1].isoformat()}"
    quoted = text.rstrip(". ")
    weekdays = {d.weekday() for d in days}
    if 6 <= gap <= 8 and len(weekdays) == 1:
        return f'{name}: "{quoted}" — every {_WEEKDAYS[weekdays.pop()]} ({span})'
    return f'{name}: "{quoted}" — about every {gap:g} days ({span})'


def detect(rows: Sequence[Any], message_times: Mapping[str, datetime],
           pid: Any) -> dict[str, tuple[str, str, list[str], list[str], float]]:
    """Periodic patterns in the consolidation job's active-fact rows (``consolidation.
    _FACTS_SQL`` columns); ``message_times``: occurred_at per source message id; ``pid``:
    the id maker (kind, key) -> pattern id."""
    by_subject: dict[str, list[Any]] = defaultdict(list)
    for r in rows:
        by_subject[r[1]].append(r)
    found: dict[str, tuple[str, str, list[str], list[str], float]] = {}
    for key, facts in sorted(by_subject.items()):
        name = facts[0][2]
        own = frozenset(fold_case(w) for w in _WORD.findall(name))
        groups: list[tuple[frozenset[str], list[Any]]] = []
        for r in sorted(facts, key=lambda r: r[0]):
            sig = signature(r[4], own)
            if not sig:
                continue
            for first_sig, members in groups:
                if _jaccard(sig, first_sig) >= SIMILARITY:
                    members.append(r)
                    break
            else:
                groups.append((sig, [r]))
        for _sig, members in groups:
            when: dict[date, str] = {}
            for r in members:
                for m in r[9] or []:
                    at = message_times.get(m)
                    if at is not None:
                        when.setdefault(at.date(), m)
                if not r[9]:
                    when.setdefault(r[7].date(), "")
            days = sorted(when)
            gap = regular(days)
            if gap is None:
                continue
            found[pid("periodic", f"{key}\x00{members[0][0]}")] = (
                "periodic", describe(name, members[0][4], days, gap),
                [r[0] for r in members][:MAX_EVIDENCE],
                [when[d] for d in days if when[d]][:MAX_EVIDENCE],
                round(min(1.0, 0.5 + 0.1 * (len(days) - MIN_OCCURRENCES)), 3))
    return found
