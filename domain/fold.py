"""The reference model of facts: a pure, in-memory fold of the agent's events to fact rows.

Why it exists: the fact table is derived three ways — incrementally by the projector (SQL per
event), in bulk by rebuild, and on demand by the audit's ``facts_as_of`` (replaying the log up
to a time). This fold is the executable definition all three must agree with; the property
test compares the projector's ``mem_facts`` with it row for row.

Semantics (one row per fact, ADR-0005):
- ``FactAdded``/``FactUpdated`` create the row: ``valid_from`` from the event (the message's
  ``occurred_at``), ``recorded_at`` = event timestamp (transaction time), status ``active``,
  ``source_message_ids`` = the event's sources: the processed message first, then the earlier
  messages the extractor cited (a fact may rest on several turns; version-1 events, stored
  before facts had several sources, are upcast to [source message]);
- ``FactUpdated`` also ends the superseded fact: status ``superseded``, ``superseded_by``,
  ``valid_to`` = the new fact's ``valid_from``, ``invalidated_at`` = event timestamp;
- ``FactRetracted``: status ``retracted``, ``valid_to`` = ``retracted_at``,
  ``invalidated_at`` = event timestamp;
- ``FactConfirmed``: ``reinforcement_count`` += 1, ``last_confirmed_at`` = the latest
  ``confirmed_at``, the confirming message appended to ``source_message_ids`` (once);
- ``Forgotten`` (forget the agent): every active fact gets status ``forgotten``,
  ``valid_to`` = ``forgotten_at``, ``invalidated_at`` = event timestamp;
- ``EntitiesMerged``: facts whose subject is the merged entity move to the surviving one;
- ``CorrectionNoted``: the correcting fact gets ``is_correction`` (ADR-0019);
- job events (``domain.jobs.AgentJobs``, another aggregate, so no ``event_versions`` entry)
  fold into ``UsageRow``s (``mem_fact_usage``), not the fact rows: ``RetrievalsObserved``
  adds its counts to ``times_retrieved`` and moves ``last_retrieved_at`` to the latest time;
  ``ImportanceAssessed`` sets ``importance``. Both skip facts the fold does not know;
- every AgentMemory event touching a fact appends its aggregate version to ``event_versions`` (the audit
  fetches exactly those events from the log).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import singledispatchmethod
from typing import Any, Literal
from uuid import UUID

from engramdb.domain.aggregate import AgentMemory
from engramdb.domain.jobs import AgentJobs
from engramdb.domain.payloads import FactPayload

AsOfAxis = Literal["both", "valid", "transaction"]


@dataclass
class FactRow:
    """One row of ``mem_facts`` (minus the embedding, which is not domain state)."""

    agent_id: str
    fact_id: str
    entity_key: str
    attribute_key: str | None
    fact_text: str
    category: str
    confidence: float
    importance: float
    valid_from: datetime
    recorded_at: datetime
    speaker: str | None
    decided_by: dict[str, Any]
    source_message_id: str | None
    source_message_ids: list[str] = field(default_factory=list)
    reinforcement_count: int = 0
    valid_to: datetime | None = None
    invalidated_at: datetime | None = None
    status: str = "active"
    supersedes_fact_id: str | None = None
    superseded_by: str | None = None
    last_confirmed_at: datetime | None = None
    times_retrieved: int = 0
    is_correction: bool = False
    event_versions: list[int] = field(default_factory=list)
    # per known source turn, in ``source_message_ids`` order: {"s": session, "m": metadata}.
    # Filled by the memory read model from the turns it has seen (facts filtered by turn
    # scope without a join, ADR-0047); this fold leaves it empty: turns are other aggregates
    source_scope: list[dict[str, Any]] = field(default_factory=list)

    def copy(self) -> FactRow:
        return replace(
            self,
            decided_by=dict(self.decided_by),
            source_message_ids=list(self.source_message_ids),
            event_versions=list(self.event_versions),
            source_scope=[dict(s) for s in self.source_scope],
        )


@dataclass
class UsageRow:
    """One row of ``mem_fact_usage``: what the sleep-time jobs learnt about a fact."""

    agent_id: str
    fact_id: str
    importance: float | None = None
    times_retrieved: int = 0
    last_retrieved_at: datetime | None = None
    vitality: float | None = None  # ADR-0022
    low_vitality: bool = False


def new_fact_row(
    agent: str, fact: FactPayload, recorded_at: datetime, version: int, supersedes: str | None
) -> FactRow:
    """The row an ADD/UPDATE creates (``recorded_at``/``version``: of its event)."""
    return FactRow(
        agent_id=agent,
        fact_id=fact.fact_id,
        entity_key=fact.entity_key,
        attribute_key=fact.attribute_key,
        fact_text=fact.text,
        category=fact.category,
        confidence=float(fact.confidence),
        importance=float(fact.importance),
        valid_from=fact.valid_from,
        recorded_at=recorded_at,
        speaker=fact.speaker,
        decided_by=dict(fact.decided_by or {}),
        source_message_id=fact.source_message_id,
        source_message_ids=list(fact.source_message_ids),
        supersedes_fact_id=supersedes,
        event_versions=[version],
    )


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    """GREATEST() as PostgreSQL computes it: NULLs are ignored."""
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


class FactFold:
    """Incremental fold over the events of any number of agents; rows keyed (agent, fact).

    Handlers are registered per event class (``functools.singledispatchmethod``, the style
    eventsourcing documents for projections): an event type without one is ignored.
    """

    def __init__(self, agent_id: str | None = None) -> None:
        self.default_agent_id = agent_id
        self.agents: dict[UUID, str] = {}
        self.rows: dict[tuple[str, str], FactRow] = {}
        self.usage: dict[tuple[str, str], UsageRow] = {}

    def agent_of(self, event: AgentMemory.Event) -> str:
        agent = self.agents.get(event.originator_id, self.default_agent_id)
        if agent is None:
            raise KeyError(f"no Opened event seen for aggregate {event.originator_id}")
        return agent

    def apply(self, event: object) -> None:
        # the dispatcher directly: ``self._on`` builds a new bound wrapper per call
        # (singledispatchmethod.__get__), ~10% of a bulk rebuild's fold
        _DISPATCH(type(event))(self, event)

    def apply_all(self, events: Iterable[object]) -> FactFold:
        for event in events:
            self.apply(event)
        return self

    # ----- handlers ------------------------------------------------------------------

    @singledispatchmethod
    def _on(self, event: object) -> None:
        """Events that do not touch facts."""

    @_on.register
    def _opened(self, e: AgentMemory.Opened) -> None:
        self.agents[e.originator_id] = e.agent_id

    @_on.register
    def _fact_added(self, e: AgentMemory.FactAdded) -> None:
        agent = self.agent_of(e)
        self.rows[(agent, e.fact_id)] = new_fact_row(
            agent, e, e.timestamp, e.originator_version, None
        )

    @_on.register
    def _fact_updated(self, e: AgentMemory.FactUpdated) -> None:
        agent = self.agent_of(e)
        old = self.rows.get((agent, e.supersedes_fact_id))
        if old is not None:
            old.status = "superseded"
            old.superseded_by = e.fact_id
            old.valid_to = e.valid_from
            old.invalidated_at = e.timestamp
            old.event_versions.append(e.originator_version)
        self.rows[(agent, e.fact_id)] = new_fact_row(
            agent, e, e.timestamp, e.originator_version, e.supersedes_fact_id
        )

    @_on.register
    def _fact_confirmed(self, e: AgentMemory.FactConfirmed) -> None:
        row = self.rows.get((self.agent_of(e), e.fact_id))
        if row is None:
            return
        row.reinforcement_count += 1
        row.last_confirmed_at = _later(row.last_confirmed_at, e.confirmed_at)
        if e.message_id and e.message_id not in row.source_message_ids:
            row.source_message_ids.append(e.message_id)
        row.event_versions.append(e.originator_version)

    @_on.register
    def _fact_retracted(self, e: AgentMemory.FactRetracted) -> None:
        row = self.rows.get((self.agent_of(e), e.fact_id))
        if row is None:
            return
        row.status = "retracted"
        row.valid_to = e.retracted_at
        row.invalidated_at = e.timestamp
        row.event_versions.append(e.originator_version)

    @_on.register
    def _forgotten(self, e: AgentMemory.Forgotten) -> None:
        agent = self.agent_of(e)
        for (row_agent, _), row in self.rows.items():
            if row_agent == agent and row.status == "active":
                row.status = "forgotten"
                row.valid_to = e.forgotten_at
                row.invalidated_at = e.timestamp
                row.event_versions.append(e.originator_version)

    @_on.register
    def _entities_merged(self, e: AgentMemory.EntitiesMerged) -> None:
        agent = self.agent_of(e)
        for (row_agent, _), row in self.rows.items():
            if row_agent == agent and row.entity_key == e.merged_key:
                row.entity_key = e.into_key

    @_on.register
    def _correction_noted(self, e: AgentMemory.CorrectionNoted) -> None:
        row = self.rows.get((self.agent_of(e), e.fact_id))
        if row is None:
            return
        row.is_correction = True
        row.event_versions.append(e.originator_version)

    def _usage(self, agent: str, fact_id: str) -> UsageRow | None:
        if (agent, fact_id) not in self.rows:
            return None
        return self.usage.setdefault((agent, fact_id), UsageRow(agent, fact_id))

    @_on.register
    def _retrievals_observed(self, e: AgentJobs.RetrievalsObserved) -> None:
        for fact_id, count in e.counts.items():
            row = self._usage(e.agent_id, fact_id)
            if row is not None:
                row.times_retrieved += int(count)
                at = e.last_at.get(fact_id)
                row.last_retrieved_at = _later(
                    row.last_retrieved_at, datetime.fromisoformat(at) if at else None
                )

    @_on.register
    def _importance_assessed(self, e: AgentJobs.ImportanceAssessed) -> None:
        for fact_id, importance in e.facts.items():
            row = self._usage(e.agent_id, fact_id)
            if row is not None:
                row.importance = float(importance)

    @_on.register
    def _vitality_assessed(self, e: AgentJobs.FactVitalityAssessed) -> None:
        low = set(e.low)
        for fact_id, score in e.facts.items():
            row = self._usage(e.agent_id, fact_id)
            if row is not None:
                row.vitality, row.low_vitality = float(score), fact_id in low


_DISPATCH = FactFold.__dict__["_on"].dispatcher.dispatch


def fold_facts(events: Iterable[Any], agent_id: str | None = None) -> dict[str, FactRow]:
    """Fact rows of ONE agent's events, keyed by fact id (``agent_id`` if ``Opened`` is absent)."""
    folded = FactFold(agent_id).apply_all(events)
    return {fact_id: row for (_, fact_id), row in folded.rows.items()}


def facts_as_of(
    events: Iterable[Any],
    t: datetime,
    agent_id: str | None = None,
    axis: AsOfAxis = "both",
) -> list[FactRow]:
    """Facts of one agent that were true at ``t`` as memory knew them at ``t``.

    ``both`` (default): only decisions recorded by ``t`` count (transaction time), and of the
    resulting rows those with ``valid_from <= t`` that had not ended by ``t`` (valid time).
    ``transaction``: what memory held at ``t`` whatever the conversation dates.
    ``valid``: everything memory knows now, restricted to facts valid at ``t``.
    """
    events = list(events)
    if axis in ("both", "transaction"):
        events = [e for e in events if e.timestamp <= t or isinstance(e, AgentMemory.Opened)]
    rows = fold_facts(events, agent_id).values()
    out: list[FactRow] = []
    for row in rows:
        if axis in ("both", "transaction") and row.recorded_at > t:
            continue
        if axis == "transaction":
            if row.status == "active":
                out.append(row)
            continue
        if row.valid_from > t:
            continue
        if row.valid_to is not None and row.valid_to <= t:
            continue
        out.append(row)
    return sorted(out, key=lambda r: (r.valid_from, r.fact_id))
