"""Consolidation by an LLM (ADR-0030) — placeholder until the reviewer lands."""

from __future__ import annotations

from typing import Any

from engramdb.services.jobs.base import JobContext

PROMPT = "consolidation/v1"
METHOD = f"llm:{PROMPT}"


def review(ctx: JobContext, agent_id: str, rows: list[Any],
           found: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    return {}, None
