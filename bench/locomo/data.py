"""Load the LoCoMo benchmark file into typed records.

Why a loader of our own: the file has quirks that silently skew a retrieval score if
taken as-is — evidence ids written ``D8:6; D9:17``, ``D:11:26`` or ``D30:05``, evidence
naming turns that do not exist, ``session_N_date_time`` keys without a session, images
whose only text is a ``blip_caption``. Every repair is made here, once, and counted, so
the report can say how many gold ids were repaired or skipped.

The data (CC BY-NC 4.0) is read at run time from outside the repository; nothing here
embeds any of it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
#: Categories pooled into "overall"; category 5 (adversarial) is reported on its own row.
SCORED_CATEGORIES: tuple[int, ...] = (1, 2, 3, 4)

_DATE_RE = re.compile(
    r"^\s*(?P<hour>\d{1,2}):(?P<minute>\d{2})\s*(?P<ampm>[ap])\.?m\.?\s+on\s+"
    r"(?P<day>\d{1,2})\s+(?P<month>[A-Za-z]+),?\s+(?P<year>\d{4})\s*$",
    re.IGNORECASE,
)
_MONTHS = {
    name: i + 1
    for i, name in enumerate(
        [
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ]
    )
}
_SESSION_KEY = re.compile(r"^session_(\d+)$")
_EVIDENCE_RE = re.compile(r"^D:?(\d+):0*(\d+)$")


def parse_session_datetime(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` → ``2023-05-08 13:56 UTC``.

    LoCoMo gives no time zone; UTC is an arbitrary but fixed choice, so runs are
    reproducible and relative order (all that retrieval uses) is preserved.
    """
    match = _DATE_RE.match(text)
    if not match:
        raise ValueError(f"unrecognised LoCoMo session date: {text!r}")
    month_name = match["month"].lower()
    month = _MONTHS.get(month_name) or next(
        (n for name, n in _MONTHS.items() if len(month_name) >= 3 and name.startswith(month_name)),
        None,
    )
    if month is None:
        raise ValueError(f"unrecognised month in LoCoMo session date: {text!r}")
    hour = int(match["hour"]) % 12 + (12 if match["ampm"].lower() == "p" else 0)
    return datetime(
        int(match["year"]), month, int(match["day"]), hour, int(match["minute"]), tzinfo=UTC
    )


def normalize_evidence_id(raw: str) -> str | None:
    """One evidence token to canonical ``D<session>:<turn>``; ``None`` if it is no id."""
    match = _EVIDENCE_RE.match(raw.strip())
    if not match:
        return None
    return f"D{int(match[1])}:{int(match[2])}"


def repair_evidence(
    evidence: Iterable[Any], valid_ids: set[str] | frozenset[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Gold evidence → (ids naming real turns, in order and deduplicated; skipped raw tokens).

    Splits ``"D8:6; D9:17"`` (also on ``,`` and whitespace), repairs ``D:11:26`` →
    ``D11:26`` and ``D30:05`` → ``D30:5``, and skips tokens that name no turn of the
    conversation (e.g. a bare ``"D"``): an unreachable gold id would cap recall below 1
    for every system alike and measure the dataset, not retrieval.
    """
    kept: list[str] = []
    skipped: list[str] = []
    for item in evidence:
        for token in re.split(r"[;,\s]+", str(item)):
            if not token:
                continue
            canonical = normalize_evidence_id(token)
            if canonical is None or canonical not in valid_ids:
                skipped.append(token)
            elif canonical not in kept:
                kept.append(canonical)
    return tuple(kept), tuple(skipped)


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    caption: str | None
    session_id: str
    occurred_at: datetime
    date_text: str

    @property
    def full_text(self) -> str:
        """What engramdb ingests: the utterance, plus an image's caption as ``[shares …]``."""
        if self.caption:
            return f"{self.text} [shares {self.caption}]".strip()
        return self.text

    @property
    def dated_text(self) -> str:
        """What the baselines index: the session date and speaker in the text, so BM25 and
        dense retrieval can use them like engramdb uses ``occurred_at`` and ``speaker``."""
        return f"[{self.date_text}] {self.speaker}: {self.full_text}"


@dataclass(frozen=True)
class Session:
    session_id: str  # "session_N"
    index: int
    occurred_at: datetime
    date_text: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Observation:
    """One of the dataset's own per-session facts, with the turns it cites."""

    session_id: str
    speaker: str
    text: str
    dia_ids: tuple[str, ...]


@dataclass(frozen=True)
class Question:
    qid: str  # "<sample_id>#<index in qa>": an id, never the question text, goes to outputs
    question: str
    category: int
    gold: tuple[str, ...]
    skipped_evidence: tuple[str, ...]
    repaired: bool


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    speakers: tuple[str, ...]
    sessions: tuple[Session, ...]
    observations: tuple[Observation, ...] = field(repr=False)
    questions: tuple[Question, ...] = field(repr=False)

    @property
    def turns(self) -> list[Turn]:
        return [turn for session in self.sessions for turn in session.turns]

    @property
    def turn_ids(self) -> frozenset[str]:
        return frozenset(turn.dia_id for turn in self.turns)


def _sessions(conv: dict[str, Any]) -> list[Session]:
    numbered = sorted(
        (int(m[1]), key) for key in conv if (m := _SESSION_KEY.match(key)) and conv[key]
    )
    sessions: list[Session] = []
    for index, key in numbered:
        date_text = str(conv[f"{key}_date_time"])
        occurred_at = parse_session_datetime(date_text)
        turns = tuple(
            Turn(
                dia_id=str(t["dia_id"]),
                speaker=str(t["speaker"]),
                text=str(t.get("text") or ""),
                caption=(str(t["blip_caption"]).strip() or None) if t.get("blip_caption") else None,
                session_id=key,
                occurred_at=occurred_at,
                date_text=date_text,
            )
            for t in conv[key]
        )
        sessions.append(Session(key, index, occurred_at, date_text, turns))
    return sessions


def _observations(raw: dict[str, Any], valid_ids: frozenset[str]) -> list[Observation]:
    out: list[Observation] = []
    for session_key, by_speaker in raw.items():
        session_id = session_key.removesuffix("_observation")
        for speaker, facts in (by_speaker or {}).items():
            for fact in facts:
                text, cites = fact[0], fact[1] if len(fact) > 1 else []
                ids, _ = repair_evidence(cites if isinstance(cites, list) else [cites], valid_ids)
                if str(text).strip() and ids:
                    out.append(Observation(session_id, str(speaker), str(text).strip(), ids))
    return out


def _questions(
    sample_id: str, qa: Sequence[dict[str, Any]], valid_ids: frozenset[str]
) -> list[Question]:
    out: list[Question] = []
    for i, item in enumerate(qa):
        raw = [str(e) for e in item.get("evidence") or []]
        gold, skipped = repair_evidence(raw, valid_ids)
        out.append(
            Question(
                qid=f"{sample_id}#{i}",
                question=str(item["question"]),
                category=int(item["category"]),
                gold=gold,
                skipped_evidence=skipped,
                repaired=sorted(gold) != sorted(r for r in raw if r in valid_ids),
            )
        )
    return out


def parse_conversation(sample: dict[str, Any]) -> Conversation:
    conv = sample["conversation"]
    sessions = _sessions(conv)
    valid = frozenset(t.dia_id for s in sessions for t in s.turns)
    speakers = tuple(str(conv[k]) for k in ("speaker_a", "speaker_b") if conv.get(k))
    return Conversation(
        sample_id=str(sample.get("sample_id", "conv")),
        speakers=speakers,
        sessions=tuple(sessions),
        observations=tuple(_observations(sample.get("observation") or {}, valid)),
        questions=tuple(
            _questions(str(sample.get("sample_id", "conv")), sample.get("qa") or [], valid)
        ),
    )


def load_locomo(path: str | Path) -> list[Conversation]:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict):  # a single conversation
        data = [data]
    return [parse_conversation(sample) for sample in data]


def subset(
    conversations: Sequence[Conversation],
    *,
    max_conversations: int | None = None,
    max_sessions: int | None = None,
    max_questions: int | None = None,
) -> list[Conversation]:
    """A smoke subset: the first N conversations, their first N sessions, and the first N
    questions (per conversation) whose gold evidence all lies in the kept sessions."""
    picked = list(conversations[:max_conversations] if max_conversations else conversations)
    out: list[Conversation] = []
    for conv in picked:
        sessions = conv.sessions[:max_sessions] if max_sessions else conv.sessions
        kept_ids = {t.dia_id for s in sessions for t in s.turns}
        kept_sessions = {s.session_id for s in sessions}
        questions = [q for q in conv.questions if set(q.gold) <= kept_ids]
        if max_questions:
            questions = questions[:max_questions]
        observations = [o for o in conv.observations if o.session_id in kept_sessions]
        out.append(
            Conversation(
                conv.sample_id,
                conv.speakers,
                tuple(sessions),
                tuple(observations),
                tuple(questions),
            )
        )
    return out
