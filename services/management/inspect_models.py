"""The shapes of the inspector's reads (issue 23): an agent's overview row, the instants of its
history, a diff between two instants, its entity graph, its patterns, job runs, erasure markers.

Apart from the queries (``inspect_queries``) so an entry point can name them without importing
the use case (ADR-0043), like ``management.models``.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from engramdb.services.management.models import FactItem


class AgentOverview(BaseModel):
    """One row of the inspector's agent list: counts from the read models, all indexed."""

    agent_id: str
    opened_at: datetime
    active_facts: int
    entities: int
    messages: int
    last_activity: datetime | None = Field(default=None, description="latest recorded turn")
    pending: int = Field(default=0, description="extractions an LLM outage deferred")
    forgotten_at: datetime | None = None
    capped_at: int | None = Field(default=None, description="counts above this were not "
                                  "counted further (a count of capped_at + 1 means 'more')")

    def shown(self, count: int) -> str:
        """A count as the list shows it: ``10,000+`` past the cap."""
        if self.capped_at is not None and count > self.capped_at:
            return f"{self.capped_at:,}+"
        return f"{count:,}"


class Timeline(BaseModel):
    """The instants a time-travel control moves over: up to ``limit`` of the agent's decision
    times (facts recorded or ended), evenly sampled when there are more."""

    instants: list[datetime] = Field(default_factory=list)
    first: datetime | None = None
    last: datetime | None = None


class FactChange(BaseModel):
    """A fact held at ``after`` that replaced one held at ``before`` (supersession)."""

    before: FactItem
    after: FactItem


class FactsDiff(BaseModel):
    """What memory held at ``t2`` and not at ``t1`` and the reverse, as known at each instant.
    ``changed`` pairs an ended fact with the one that superseded it; ``added`` and ``removed``
    hold the rest. Each list is capped at ``limit`` (``truncated`` says a list was cut)."""

    t1: datetime
    t2: datetime
    added: list[FactItem] = Field(default_factory=list)
    removed: list[FactItem] = Field(default_factory=list)
    changed: list[FactChange] = Field(default_factory=list)
    truncated: bool = False


class GraphNode(BaseModel):
    entity_key: str
    display_name: str
    entity_type: str
    active_facts: int
    community: str | None = None


class GraphEdge(BaseModel):
    source_key: str
    target_key: str
    relation_type: str
    strength: float
    mentions: int


class Community(BaseModel):
    community_id: str
    label: str
    method: str
    members: list[str]


class EntityGraph(BaseModel):
    """A bounded neighbourhood of the entity graph: the strongest ``limit`` edges (around
    ``center`` when given), their end nodes, and the communities those nodes belong to."""

    center: str | None = None
    nodes: list[GraphNode] = Field(default_factory=list)
    edges: list[GraphEdge] = Field(default_factory=list)
    communities: list[Community] = Field(default_factory=list)
    truncated: bool = False


class PatternItem(BaseModel):
    pattern_id: str
    text: str
    kind: str
    method: str
    confidence: float
    supporting_fact_ids: list[str]
    recorded_at: datetime


class SessionItem(BaseModel):
    session_id: str | None
    messages: int
    first_at: datetime
    last_at: datetime


class JobRunItem(BaseModel):
    job: str
    agent_id: str
    status: str
    error: str | None
    events: int
    duration_ms: float
    started_at: datetime
    runs: int
    failures: int


class ErasureMarker(BaseModel):
    """A destroyed data key (ADR-0018): the key id is a hash of the agent id, which is gone."""

    key_id: str
    erased_at: datetime | None


class DeadLetterItem(BaseModel):
    """One dead letter as the ingest consumer wrote it (``write.messages.DeadLetter``), with
    its place in the dead-letter stream."""

    seq: int
    reason: str
    stage: str
    agent_id: str | None = None
    subject: str
    payload_preview: str = Field(default="", description="the payload's first 1 kB, as text")
    by_reference: bool = False
