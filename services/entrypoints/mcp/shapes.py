"""What the MCP ``retrieve`` tool answers: the context and the facts' ids, little else (ADR-0050).

Why not ``RetrieveResult`` as is: a model pays for every token of a tool's answer on every
call. The full result of one retrieve was 7.8 KB of JSON (sixteen scores per fact, the plan
and its entities) around a 345-character context, and its output schema alone was 4.9 KB of
every session's tool list. A model needs the prompt-ready ``context`` and the ids it can pass
to ``get_fact`` / ``delete_fact`` / ``history``; scores and the plan are there when it asks
(``detail: true``), as an untyped object so the schema stays small.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from engramdb.services.retrieve.models import RetrieveResult


class RecalledFact(BaseModel):
    fact_id: str
    text: str


class Recall(BaseModel):
    context: str = Field(description="prompt-ready: known facts, then relevant past turns")
    facts: list[RecalledFact] = Field(description="the facts in the context, best first")
    detail: dict[str, Any] | None = Field(
        default=None, description="with detail=true: scores, plan, ranked turns"
    )


def recall(result: RetrieveResult, *, detail: bool) -> Recall:
    """The compact answer; with ``detail`` also the full result (trace left out: it is the
    pipeline's timing, of no use to a model)."""
    facts = [RecalledFact(fact_id=f.fact_id, text=f.fact_text) for f in result.facts]
    full = result.model_dump(mode="json", exclude={"trace"}) if detail else None
    return Recall(context=result.context, facts=facts, detail=full)
