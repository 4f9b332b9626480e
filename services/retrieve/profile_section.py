"""Entity profiles in the retrieve context (ADR-0030): "About <entity>" for what the query names.

``RetrieveConfig.context.profiles_in_context`` (default off: docs/spec.md §3.6 says profiles are not
injected, and LoCoMo's evidence recall cannot see a context-only section — ADR-0030). When on,
the entities the planner found *in the query* (deterministic, not expansions) that have a
profile (``ProfileRefreshed`` → ``mem_entities.profile_text``) are returned in
``RetrieveResult.profiles`` and written as one section after the three of docs/spec.md §3.6::

    Known facts: ...
    Observed patterns: ...
    Relevant conversations: ...
    About Caroline:
    - Caroline (person): ...

After them, so a reader of the spec's layout finds its sections where it expects them. Budget:
the section reserves at most ``PROFILE_SHARE`` of ``context_max_tokens`` (the other sections
are formatted within the rest), each profile cut to what fits; nothing is reserved when no
profile applies. Profiles are not bi-temporal: an as-of retrieval gets none.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from engramdb.domain.text import approx_tokens
from engramdb.services.retrieve.models import EntityProfile, RetrievalPlan
from engramdb.services.retrieve.stages import RetrieveCall

MAX_PROFILES = 2
PROFILE_SHARE = 0.15

_SQL = """
SELECT entity_key, display_name, profile_text, coalesce(profile_method, '')
  FROM mem_entities
 WHERE agent_id = %(a)s AND entity_key = ANY(%(k)s) AND profile_text <> '' AND merged_into IS NULL
"""


def profiles_for(pool: Any, call: RetrieveCall, plan: RetrievalPlan) -> list[EntityProfile]:
    """Profiles of the entities the query names, in the plan's order (none when off)."""
    if not call.cfg.context.profiles_in_context or call.as_of is not None:
        return []
    keys = [e.entity_key for e in plan.entities if e.source == "deterministic"]
    if not keys:
        return []
    with pool.connection() as conn:
        rows = {r[0]: r for r in conn.execute(_SQL, {"a": call.agent_id, "k": keys}).fetchall()}
    return [EntityProfile(entity_key=k, entity_name=rows[k][1], profile=rows[k][2], method=rows[k][3])
            for k in keys if k in rows][:MAX_PROFILES]


def reserved_tokens(profiles: list[EntityProfile], context_max_tokens: int) -> int:
    """Tokens kept for the section: what the profiles need, at most the share."""
    if not profiles:
        return 0
    need = sum(approx_tokens(section_lines([p])) for p in profiles)
    return min(need, int(context_max_tokens * PROFILE_SHARE))


def section_lines(profiles: list[EntityProfile]) -> str:
    return "\n".join(f"About {p.entity_name}:\n- {' '.join(p.profile.split())}" for p in profiles)


def section(profiles: list[EntityProfile], budget: int) -> tuple[str, int]:
    """The section within ``budget`` tokens (≈ chars/4) and how many profiles it shows."""
    parts: list[str] = []
    left = budget * 4
    for p in profiles:
        head = f"About {p.entity_name}:\n- "
        body = " ".join(p.profile.split())
        room = left - len(head) - 1
        if room < 40:
            break
        if len(body) > room:
            body = body[: room - 3].rstrip() + "..."
        parts.append(head + body)
        left -= len(parts[-1]) + 1
    return "\n".join(parts), len(parts)


def format_with(call: RetrieveCall, profiles: list[EntityProfile], fmt: Callable[[RetrieveCall], str]) -> str:
    """``fmt`` (the spec's sections) within the budget less the profiles' reserve, then the
    section in what is left."""
    if not profiles:
        return fmt(call)
    total = call.cfg.context.context_max_tokens
    reserve = reserved_tokens(profiles, total)
    inner = dataclasses.replace(call, cfg=call.cfg.model_copy(update={"context_max_tokens": total - reserve}))
    context = fmt(inner)
    text, shown = section(profiles, max(0, total - approx_tokens(context)))
    call.trace.note(profiles_shown=shown)
    return context + ("\n" if context and text else "") + text
