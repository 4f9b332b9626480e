"""What every adapter says to its framework: a retrieve's facts as lines, a write's outcome.

One wording for all adapters, so an agent moved from one framework to another sees the same
memory text (and a test of one adapter checks the wording of all).
"""

from __future__ import annotations

from typing import Any

from engramdb.services.retrieve.models import RetrieveResult
from engramdb.services.write.models import WriteResult

NOTHING_RECALLED = "No relevant memories."


def recalled_text(result: RetrieveResult, top_k: int) -> str:
    """The retrieve's prompt-ready context (facts and turns), or a plain 'nothing'."""
    if not result.facts and not result.events:
        return NOTHING_RECALLED
    return result.context or "\n".join(f"- {f.fact_text}" for f in result.facts[:top_k])


def fact_metadata(fact: Any) -> dict[str, Any]:
    return {"fact_id": fact.fact_id, "score": fact.score, "entity": fact.entity_name,
            "source_message_ids": list(fact.source_message_ids)}


def written_text(result: WriteResult) -> str:
    kinds = [d for d in result.decisions if d.kind in ("ADD", "UPDATE", "DELETE", "NOOP")]
    if not kinds:
        return "Stored the message; no new fact."
    return "Stored: " + "; ".join(f"{d.kind} {d.text}" for d in kinds if d.text)
