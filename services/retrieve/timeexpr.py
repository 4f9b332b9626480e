"""Time expressions in a question, as windows of time to match against when a fact became
valid or a turn was said (issue 9 lever (c), ADR-0021).

Why deterministic and small: "What did Gina find on 1 February, 2023?", "in October 2023",
"em maio de 2023", "last year" name *when*, which neither the embedding nor BM25 can match
against a timestamp. A parser that knows day/month/year in EN and PT, bare years after
"in/em/during", and a few relative forms ("last year/month/week", "yesterday", "last May",
"ano passado", "mês passado", "ontem") covers what people type; anything else yields no
window and the lever does nothing. Relative forms count back from ``anchor`` (the retrieve's
recency anchor: ``as_of`` or the agent's latest message). A day gets ± ``DAY_SLACK`` days:
people say "on Monday" of something told the day after. Pure, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta

DAY_SLACK = 2
MONTHS: dict[str, int] = {}
for _i, _names in enumerate(
    (
        "january jan janeiro jan", "february feb fevereiro fev", "march mar março marco mar",
        "april apr abril abr", "may maio mai", "june jun junho jun", "july jul julho jul",
        "august aug agosto ago", "september sep sept setembro set", "october oct outubro out",
        "november nov novembro nov", "december dec dezembro dez",
    ),
    start=1,
):
    for _name in _names.split():
        MONTHS[_name] = _i
# full names only (and "may"): three-letter abbreviations are too often words ("mar", "set")
_MONTH = r"(?P<{g}>" + "|".join(sorted((m for m in MONTHS if len(m) > 3 or m == "may"), key=len, reverse=True)) + ")"
_YEAR = r"(?P<{g}>(?:19|20)\d\d)"
_DAY = r"(?P<{g}>[0-3]?\d)(?:st|nd|rd|th|º)?"

_PATTERNS = [
    # May 23, 2023 | May 23rd 2023
    ("mdy", re.compile(rf"\b{_MONTH.format(g='m')}\s+{_DAY.format(g='d')},?\s+{_YEAR.format(g='y')}\b", re.I)),
    # 23 May, 2023 | 23 de maio de 2023
    ("dmy", re.compile(rf"\b{_DAY.format(g='d')}\s+(?:de\s+)?{_MONTH.format(g='m')},?\s+(?:de\s+)?{_YEAR.format(g='y')}\b", re.I)),
    # May 2023 | maio de 2023
    ("my", re.compile(rf"\b{_MONTH.format(g='m')},?\s+(?:de\s+|of\s+)?{_YEAR.format(g='y')}\b", re.I)),
    # last May | em maio passado | maio passado
    ("last_month_name", re.compile(rf"\b(?:last\s+{_MONTH.format(g='m')}|{_MONTH.format(g='m2')}\s+passad[oa])\b", re.I)),
    # in 2023 | em 2023 | during 2023
    ("y", re.compile(rf"\b(?:in|em|during|durante|of|de)\s+{_YEAR.format(g='y')}\b", re.I)),
    # in June | em junho (no year: that month of any year)
    ("m", re.compile(rf"\b(?:in|em|during|durante|this|next|no|na)\s+(?:de\s+)?{_MONTH.format(g='m')}\b", re.I)),
]
_RELATIVE = [
    (re.compile(r"\b(?:last|past)\s+year\b|\bano\s+passado\b", re.I), "year"),
    (re.compile(r"\b(?:last|past)\s+month\b|\bm[eê]s\s+passado\b", re.I), "month"),
    (re.compile(r"\b(?:last|past)\s+week\b|\bsemana\s+passada\b", re.I), "week"),
    (re.compile(r"\byesterday\b|\bontem\b", re.I), "yesterday"),
]


@dataclass(frozen=True)
class Window:
    """[start, end] inclusive dates; or, with ``month_of_year``, that month in any year."""

    start: date | None = None
    end: date | None = None
    month_of_year: int | None = None

    def contains(self, when: date) -> bool:
        if self.month_of_year is not None:
            return when.month == self.month_of_year
        assert self.start is not None and self.end is not None
        return self.start <= when <= self.end


def _month_window(year: int, month: int) -> Window:
    start = date(year, month, 1)
    nxt = date(year + (month == 12), month % 12 + 1, 1)
    return Window(start, nxt - timedelta(days=1))


def _day_window(year: int, month: int, day: int) -> Window | None:
    try:
        d = date(year, month, day)
    except ValueError:
        return None
    return Window(d - timedelta(days=DAY_SLACK), d + timedelta(days=DAY_SLACK))


def time_windows(query: str, anchor: datetime) -> list[Window]:
    """Every window the query names (a span already matched by a longer form is not
    matched again: "May 23, 2023" is one day, not also May and 2023)."""
    taken: list[tuple[int, int]] = []
    out: list[Window] = []
    today = anchor.date()

    def free(span: tuple[int, int]) -> bool:
        return all(span[1] <= a or span[0] >= b for a, b in taken)

    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(query):
            if not free(match.span()):
                continue
            groups = match.groupdict()
            window: Window | None = None
            if kind in ("mdy", "dmy"):
                window = _day_window(int(groups["y"]), MONTHS[groups["m"].lower()], int(groups["d"]))
            elif kind == "my":
                window = _month_window(int(groups["y"]), MONTHS[groups["m"].lower()])
            elif kind == "last_month_name":
                month = MONTHS[(groups.get("m") or groups["m2"]).lower()]
                window = _month_window(today.year if month < today.month else today.year - 1, month)
            elif kind == "y":
                year = int(groups["y"])
                window = Window(date(year, 1, 1), date(year, 12, 31))
            else:
                window = Window(month_of_year=MONTHS[groups["m"].lower()])
            if window is not None:
                taken.append(match.span())
                out.append(window)
    for pattern, unit in _RELATIVE:
        if not pattern.search(query):
            continue
        if unit == "year":
            out.append(Window(date(today.year - 1, 1, 1), date(today.year - 1, 12, 31)))
        elif unit == "month":
            first = today.replace(day=1)
            prev_last = first - timedelta(days=1)
            out.append(Window(prev_last.replace(day=1), prev_last))
        elif unit == "week":
            out.append(Window(today - timedelta(days=13), today))
        else:
            out.append(Window(today - timedelta(days=1 + DAY_SLACK), today))
    return out


def in_windows(windows: Sequence[Window], when: datetime | None) -> bool:
    return when is not None and any(w.contains(when.date()) for w in windows)
