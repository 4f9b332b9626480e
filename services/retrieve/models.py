"""Public shapes of the read pipeline: the plan, scored items and the result (docs/spec.md §3.1, §3.7).

Pydantic so that the HTTP and NATS surfaces can serialise them as they are.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engramdb.domain.agent_id import AGENT_ID_MAX_CHARS, AGENT_ID_PATTERN, AGENT_ID_RULE
from engramdb.domain.time_range import TIME_RULE, check_instant
from engramdb.services.retrieve.config import RetrieveConfig, UnknownConfigKey

Strategy = Literal["multi_signal", "skip"]
PlanReason = Literal["deterministic", "aggregation", "broad", "greeting", "empty"]
EntitySource = Literal["deterministic", "expansion"]


class PlannedEntity(BaseModel):
    """An entity the planner found for the query, and how it was found."""

    entity_key: str
    display_name: str
    source: EntitySource
    matched: str = Field("", description="the query n-gram (deterministic) or the neighbour's seed")
    in_query: bool = Field(default=False, description="its name/alias occurs in the query (graph query_bonus)")


class RetrievalPlan(BaseModel):
    strategy: Strategy = "multi_signal"
    similarity_query: str = ""
    pattern_queries: list[str] = Field(default_factory=list)
    broad_query: bool = False
    reason: PlanReason = "deterministic"
    entities: list[PlannedEntity] = Field(default_factory=list)

    def entity_keys(self, source: EntitySource | None = None) -> list[str]:
        return [e.entity_key for e in self.entities if source is None or e.source == source]


class ScoredFact(BaseModel):
    fact_id: str
    fact_text: str
    entity_key: str
    entity_name: str
    score: float
    scores: dict[str, float] = Field(default_factory=dict)
    source_message_ids: list[str] = Field(default_factory=list)
    valid_from: datetime | None = None


class ScoredPattern(BaseModel):
    pattern_id: str
    text: str
    score: float
    supporting_fact_ids: list[str] = Field(default_factory=list)


class ScoredEvent(BaseModel):
    """A raw conversation turn, ranked alongside facts ("Relevant conversations")."""

    message_id: str
    text: str
    occurred_at: datetime
    speaker: str | None = None
    session_id: str | None = None
    score: float
    scores: dict[str, float] = Field(default_factory=dict)


class EntityProfile(BaseModel):
    """An entity's profile (profiles job) shown because the query names it (ADR-0030;
    only with ``profiles_in_context``)."""

    entity_key: str
    entity_name: str
    profile: str
    method: str = Field("", description="who wrote it: 'template-v1' or 'llm:<prompt>'")


class Directive(BaseModel):
    """A procedural directive of the agent (ADR-0045): shown in the context's "Directives"
    section whenever the agent has any, whatever the query."""

    fact_id: str
    text: str
    topic: str = ""
    valid_from: datetime | None = None
    source_message_ids: list[str] = Field(default_factory=list)


class RetrieveRequest(BaseModel):
    """One retrieve call as the HTTP and NATS surfaces accept it."""

    model_config = ConfigDict(extra="forbid")

    agent_id: str = Field(
        min_length=1, max_length=AGENT_ID_MAX_CHARS, pattern=AGENT_ID_PATTERN, description=f"the tenant: {AGENT_ID_RULE}"
    )
    query: str = Field(max_length=200_000, description="the question; truncated to max_query_chars")
    as_of: datetime | None = Field(
        default=None, description=f"bi-temporal: what memory knew and held true at this time; {TIME_RULE}"
    )
    wait_for: int | None = Field(
        default=None, ge=0, le=2**63 - 1, description="log position to wait for (read-your-writes): a write's position"
    )
    config_overrides: dict[str, Any] | None = Field(default=None, description="RetrieveConfig fields for this call")
    session_id: str | list[str] | None = Field(
        default=None, description="only turns of this session (or of one of these), and facts drawn from them (ADR-0047)"
    )
    metadata: dict[str, Any] | None = Field(
        default=None,
        description="only turns whose metadata satisfies this filter (list_facts' grammar: eq/ne/in/nin/"
        "contains/icontains, AND/OR/NOT), and facts drawn from one of them; with session_id, the same turn "
        "must satisfy both (ADR-0047)",
    )

    @field_validator("as_of")
    @classmethod
    def _as_of_in_range(cls, value: datetime | None) -> datetime | None:
        return None if value is None else check_instant(value, "as_of")

    @field_validator("session_id")
    @classmethod
    def _sessions(cls, value: str | list[str] | None) -> str | list[str] | None:
        # here, not at the top: scope imports the signals, some of which import this module
        from engramdb.services.retrieve.scope import RetrieveFilter

        RetrieveFilter.of(session_id=value)
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        from engramdb.services.retrieve.scope import RetrieveFilter

        RetrieveFilter.of(metadata=value)
        return value

    def send_to(self, memory: Any) -> RetrieveResult:
        """Run this request on anything with ``Memory.retrieve``'s signature (HTTP, NATS)."""
        result: RetrieveResult = memory.retrieve(
            self.agent_id,
            self.query,
            as_of=self.as_of,
            wait_for=self.wait_for,
            config_overrides=self.config_overrides,
            **({"session_id": self.session_id} if self.session_id is not None else {}),
            **({"metadata": self.metadata} if self.metadata is not None else {}),
        )
        return result


class RetrieveResult(BaseModel):
    agent_id: str
    query: str
    context: str = ""
    facts: list[ScoredFact] = Field(default_factory=list)
    patterns: list[ScoredPattern] = Field(default_factory=list)
    events: list[ScoredEvent] = Field(default_factory=list)
    profiles: list[EntityProfile] = Field(default_factory=list,
                                          description="with profiles_in_context: 'About' profiles")
    directives: list[Directive] = Field(default_factory=list,
                                        description="the agent's active directives (ADR-0045)")
    plan: RetrievalPlan = Field(default_factory=RetrievalPlan)
    total_candidates: int = 0
    duration_ms: float = 0.0
    as_of: datetime | None = None
    trace: dict[str, Any] = Field(default_factory=dict)


__all__ = [
    "Directive",
    "EntityProfile",
    "EntitySource",
    "PlanReason",
    "PlannedEntity",
    "RetrievalPlan",
    "RetrieveConfig",
    "RetrieveRequest",
    "RetrieveResult",
    "ScoredEvent",
    "ScoredFact",
    "ScoredPattern",
    "Strategy",
    "UnknownConfigKey",
]
