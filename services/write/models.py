"""The write pipeline's shapes: its configuration in, its result out (the HTTP API and the
ingest's ``on_result`` observers see ``WriteResult``). Split from ``services/write/pipeline.py`` so
the pipeline module holds only the stages."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from engramdb.domain.decisions import DecisionReport
from engramdb.services.write.messages import ConversationMessage


class WriteConfig(BaseModel):
    informed_extraction_topk: int = 10
    context_token_budget: int = 800
    max_facts_per_event: int = 100
    enable_llm_resolution: bool = True
    resolution_timeout_sec: float = 10.0
    fuzzy_threshold: float = 0.85
    ambiguous_floor: float = 0.50
    max_conflict_retries: int = 8
    conflict_backoff_sec: float = 0.005


#: What the pipeline does on an LLM outage: record ``ExtractionDeferred`` or raise (ADR-0014).
OnOutage = Literal["defer", "raise"]


class ExtractionUnavailable(Exception):
    """The LLM was unreachable for this message (``on_outage="raise"``): nothing was saved
    beyond the message's record; retry the write later."""

    def __init__(self, agent_id: str, message_id: str, reason: str) -> None:
        super().__init__(f"extraction of {agent_id}/{message_id} unavailable: {reason}")
        self.agent_id = agent_id
        self.message_id = message_id
        self.reason = reason


class DecisionOut(BaseModel):
    kind: str
    fact_id: str | None = None
    target_fact_id: str | None = None
    entity_key: str | None = None
    text: str | None = None


class RejectedOut(BaseModel):
    reason: str
    text: str | None = None


class WriteResult(BaseModel):
    agent_id: str
    message_id: str
    position: int = Field(description="notification id to wait for (read-your-writes)")
    duplicate: bool = False
    decisions: list[DecisionOut] = Field(default_factory=list)
    rejected: list[RejectedOut] = Field(default_factory=list)
    duration_ms: float = 0.0
    llm_calls: int = 0
    extraction_error: str | None = None
    resumed: bool = False
    conflicts: int = 0
    dry_run: bool = Field(default=False, description="true: the decisions that would be made; nothing saved")
    extraction_pending: bool = Field(
        default=False,
        description="the LLM was unreachable: the message is recorded and will be extracted "
        "when it is back (retrier / `engramdb reprocess`); no decisions yet",
    )



def write_result(
    request: ConversationMessage,
    position: int,
    report: DecisionReport,
    llm_calls: int,
    error: str | None,
    resumed: bool,
    conflicts: int,
) -> WriteResult:
    decisions = [
        DecisionOut(
            kind=d.kind, fact_id=d.fact_id, target_fact_id=d.target_fact_id, entity_key=d.entity_key, text=d.text
        )
        for d in report.decisions
        if d.kind != "REJECTED"
    ]
    rejected = [RejectedOut(reason=d.reason or "", text=d.text) for d in report.rejected]
    return WriteResult(
        agent_id=request.agent_id,
        message_id=request.message_id,
        position=position,
        decisions=decisions,
        rejected=rejected,
        llm_calls=llm_calls,
        extraction_error=error,
        resumed=resumed,
        conflicts=conflicts,
    )

