"""The "Directives" section of the retrieve context (issue 26, ADR-0045).

Directives ("answer in Portuguese", "keep answers short") say how the agent should behave
for this person, whatever the question is — so they are not ranked against the query like
facts: every active directive of the agent (as of ``as_of`` for an as-of call) is shown,
newest first, in a section of its own *before* the SPEC's sections::

    Directives:
    - Answer in Portuguese.
    - Keep answers short.
    Known facts: ...

Budget: the section reserves what its lines need, at most ``DIRECTIVE_SHARE`` of
``context_max_tokens``; the other sections are formatted within the rest, so facts never
crowd a directive out (and a flood of directives never crowds the facts out). At most
``MAX_DIRECTIVES`` are read. Directive facts are left out of "Known facts", and the turns that
said them out of "Relevant conversations" (shown once; ``result.facts``/``events`` keep them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from engramdb.domain.directives import ATTRIBUTE_PREFIX, DIRECTIVE_CATEGORY
from engramdb.domain.text import approx_tokens
from engramdb.services.retrieve.models import Directive, ScoredEvent, ScoredFact
from engramdb.services.retrieve.signals.shared import fact_visibility
from engramdb.services.retrieve.stages import RetrieveCall as Call

MAX_DIRECTIVES = 20
DIRECTIVE_SHARE = 0.25
HEADER = "Directives:"


def _sql(as_of: Any) -> str:
    return (
        "SELECT f.fact_id, f.fact_text, f.attribute_key, f.valid_from, f.source_message_ids "
        "FROM mem_facts f "
        f"WHERE f.agent_id = %(a)s AND f.category = %(c)s AND {fact_visibility(as_of)} "
        "ORDER BY f.recorded_at DESC, f.fact_id LIMIT %(n)s"
    )


def directives_for(pool: Any, call: Call) -> list[Directive]:
    """The agent's active directives (as of ``call.as_of``), newest first."""
    params: dict[str, Any] = {"a": call.agent_id, "c": DIRECTIVE_CATEGORY, "n": MAX_DIRECTIVES}
    if call.as_of is not None:
        params["t"] = call.as_of
    with pool.connection() as conn:
        rows = conn.execute(_sql(call.as_of), params).fetchall()
    return [
        Directive(fact_id=r[0], text=r[1], topic=str(r[2] or "").removeprefix(ATTRIBUTE_PREFIX),
                  valid_from=r[3], source_message_ids=list(r[4] or []))
        for r in rows
    ]


def _line(d: Directive) -> str:
    return "- " + " ".join(d.text.split())


def section(directives: Sequence[Directive], budget: int) -> tuple[str, int]:
    """The section within ``budget`` tokens and how many directives it shows (whole lines
    only; the first always, cut to fit, so an agent with directives never gets none)."""
    if not directives:
        return "", 0
    lines: list[str] = [HEADER]
    used = approx_tokens(HEADER)
    for d in directives:
        line = _line(d)
        cost = approx_tokens(line) + 1
        if used + cost > budget and len(lines) > 1:
            break
        if used + cost > budget:
            line = line[: max(12, (budget - used) * 4 - 3)].rstrip() + "..."
        lines.append(line)
        used += cost
    return "\n".join(lines), len(lines) - 1


def without_directives(
    facts: list[ScoredFact], events: list[ScoredEvent], directives: Sequence[Directive]
) -> tuple[list[ScoredFact], list[ScoredEvent]]:
    """The facts and turns for the other sections: not the directives, nor the turns that
    said them (the section already does)."""
    if not directives:
        return facts, events
    ids = {d.fact_id for d in directives}
    said = {m for d in directives for m in d.source_message_ids}
    return ([f for f in facts if f.fact_id not in ids],
            [e for e in events if e.message_id not in said])


def format_with(call: Call, directives: Sequence[Directive], fmt: Callable[[Call], str]) -> str:
    """The section first, then ``fmt`` (every other section) within the rest of the budget."""
    if not directives:
        return fmt(call)
    total = call.cfg.context.context_max_tokens
    need = approx_tokens(HEADER) + sum(approx_tokens(_line(d)) + 1 for d in directives)
    reserve = min(need, max(1, int(total * DIRECTIVE_SHARE)))
    text, shown = section(directives, reserve)
    inner = dataclasses.replace(
        call, cfg=call.cfg.with_overrides({"context_max_tokens": max(0, total - reserve)})
    )
    rest = fmt(inner)
    call.trace.note(directives_shown=shown)
    return text + ("\n" + rest if rest else "")
