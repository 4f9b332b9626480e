"""Format (docs/spec.md §3.6): the prompt-ready context string within a token budget.

Layout (empty sections are omitted; nothing at all gives ``""``)::

    Known facts:
    - Lives in Porto Alegre
    Observed patterns:
    - Prefers working late at night
    Relevant conversations:
    - (2026-03-28) Had a great meeting with the product team about the roadmap...

Budget (a proportional target, not a hard cap): facts, in score order, fill the hot tier
(``hot_tier_ratio`` of ``context_max_tokens``) and then the warm tier (``warm_tier_ratio``);
patterns and conversations share what is left (at least the cold share, more when facts
use less). The best fact is always shown, and the best conversation when no fact is, so a
tiny budget never yields an empty context for a non-empty result. Tokens ≈ chars/4.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from engramdb.domain.text import approx_tokens as count_tokens
from engramdb.services.retrieve.config import RetrieveConfig


def clean(text: str) -> str:
    return " ".join(text.split())


def event_line(occurred_at: datetime, text: str, max_chars: int, speaker: str | None = None) -> str:
    body = clean(text)
    if len(body) > max_chars:
        body = body[:max_chars].rstrip() + "..."
    who = f"{speaker}: " if speaker else ""
    return f"- ({occurred_at.date().isoformat()}) {who}{body}"


@dataclass
class Formatted:
    context: str
    tokens: int
    facts_shown: int = 0
    hot: int = 0
    warm: int = 0
    patterns_shown: int = 0
    events_shown: int = 0
    budget: dict[str, int] = field(default_factory=dict)


def format_context(
    facts: Sequence[str],
    patterns: Sequence[str],
    events: Sequence[tuple[datetime, str, str | None]],
    cfg: RetrieveConfig,
) -> Formatted:
    total = cfg.context.context_max_tokens
    if total <= 0:
        return Formatted("", 0)
    hot_budget = int(total * cfg.context.hot_tier_ratio)
    warm_budget = int(total * cfg.context.warm_tier_ratio)
    out = Formatted("", 0, budget={"total": total, "hot": hot_budget, "warm": warm_budget})

    fact_lines: list[str] = []
    used = 0
    for text in facts:
        line = "- " + clean(text)
        cost = count_tokens(line)
        if fact_lines and used + cost > hot_budget + warm_budget:
            break
        tier_hot = used + cost <= hot_budget or not fact_lines
        fact_lines.append(line)
        used += cost
        if tier_hot:
            out.hot += 1
        else:
            out.warm += 1

    remaining = max(total - used, total - hot_budget - warm_budget)
    pattern_lines: list[str] = []
    for text in patterns:
        line = "- " + clean(text)
        cost = count_tokens(line)
        if cost > remaining:
            break
        pattern_lines.append(line)
        remaining -= cost

    event_lines: list[str] = []
    for occurred_at, text, speaker in events:
        line = event_line(occurred_at, text, cfg.context.event_max_chars, speaker if cfg.context.event_show_speaker else None)
        cost = count_tokens(line)
        if cost > remaining and (event_lines or fact_lines):
            break
        event_lines.append(line)
        remaining -= cost

    sections: list[str] = []
    if fact_lines:
        sections.append("Known facts:\n" + "\n".join(fact_lines))
    if pattern_lines:
        sections.append("Observed patterns:\n" + "\n".join(pattern_lines))
    if event_lines:
        sections.append("Relevant conversations:\n" + "\n".join(event_lines))
    out.context = "\n".join(sections)
    out.tokens = count_tokens(out.context)
    out.facts_shown, out.patterns_shown, out.events_shown = len(fact_lines), len(pattern_lines), len(event_lines)
    return out
