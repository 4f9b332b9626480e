"""What background jobs concluded about an agent's memory, as an event-sourced aggregate.

``AgentJobs`` is one aggregate per agent, apart from ``AgentMemory`` (ADR-0019): a job never
races the write pipeline for the agent's version numbers, and ``AgentMemory`` — loaded for
every message — does not grow with job output. Every job result is an event, so a rebuild
replays it (no job and no LLM runs again) and ``engramdb history`` can show it.

Events carry ``agent_id`` because the read models key rows by agent and this aggregate has no
row in ``mem_agents``. The state keeps only what the jobs need to stay idempotent: the last
retrieval-feedback sequence consumed (a notice is never counted twice, even when the broker
redelivers it) and the last assessed importance of each fact and entity (a run that would
assess the same values emits nothing).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID, uuid5

from eventsourcing.domain import Aggregate, event

from engramdb.domain.keys import agent_aggregate_id
from engramdb.domain.vitality import bucket_of


def _no_model(state: dict[str, Any]) -> None:
    """Version 1 -> 2 of ``ProfileRefreshed`` / ``ConsolidationReviewed``: stored before
    operations named their models (ADR-0052), so who answered is not known."""
    state["model"] = None


def agent_jobs_id(agent_id: str) -> UUID:
    """Derived from the agent's aggregate id: every job process finds the same aggregate."""
    return uuid5(agent_aggregate_id(agent_id), "jobs")


class AgentJobs(Aggregate):
    """Results of the sleep-time jobs of one agent (retrieval feedback, importance,
    patterns)."""

    class Opened(Aggregate.Created):
        agent_id: str

    class RetrievalsObserved(Aggregate.Event):
        """Retrieval notices consumed from the feedback stream, aggregated per fact:
        ``counts[fact_id]`` times returned, ``last_at[fact_id]`` the latest (ISO-8601)
        time; ``through_sequence`` is the stream sequence of the last notice counted."""

        agent_id: str
        counts: dict[str, int]
        last_at: dict[str, str]
        notices: int
        through_sequence: int

    class ImportanceAssessed(Aggregate.Event):
        """New importance of the facts (and entities) whose score changed; ``method`` names
        the scoring rule, ``reference_time`` the memory clock the recency term was taken at."""

        agent_id: str
        method: str
        facts: dict[str, float]
        entities: dict[str, float]
        reference_time: datetime

    class PatternObserved(Aggregate.Event):
        """A meta-observation (English ``text``) and its evidence. ``method`` says who found
        it: ``deterministic:<detector>`` offline, or an LLM (whose answer is ``llm_output``,
        so a replay never asks again). Same ``pattern_id`` again = the pattern changed."""

        agent_id: str
        pattern_id: str
        kind: str
        text: str
        fact_ids: list[str]
        message_ids: list[str]
        confidence: float
        method: str
        llm_output: str | None

    class PatternRetired(Aggregate.Event):
        """The pattern's evidence no longer holds (e.g. a contradiction was resolved)."""

        agent_id: str
        pattern_id: str
        reason: str

    class CommunityDetected(Aggregate.Event):
        """A group of densely connected entities (ADR-0022). ``community_id`` hashes the
        sorted ``members``: the same membership found again has the same id (and is not
        re-emitted); a changed membership is a new community and the old one is dissolved."""

        agent_id: str
        community_id: str
        members: list[str]
        label: str
        method: str

    class CommunityDissolved(Aggregate.Event):
        agent_id: str
        community_id: str
        reason: str

    class ProfileRefreshed(Aggregate.Event):
        """An English profile of an entity from its active facts. ``method`` is
        ``template-v1`` offline or ``llm:<prompt version>`` (the answer is ``llm_output``,
        so a replay never asks again); ``reference_time`` is the memory clock it was made at
        (the refresh interval is measured on it). Version 2 added ``model``: the provider
        that wrote it (ADR-0052; ``None`` offline, and for version-1 events, upcast)."""

        agent_id: str
        entity_key: str
        text: str
        method: str
        fact_ids: list[str]
        llm_output: str | None
        reference_time: datetime
        model: str | None

        class_version = 2
        upcast_v1_v2 = staticmethod(_no_model)

    class FactVitalityAssessed(Aggregate.Event):
        """Vitality of the facts whose score bucket changed (``facts``: id -> score) and,
        among them, those now flagged as low-vitality candidates for consolidation (``low``).
        Facts are never deleted for it."""

        agent_id: str
        method: str
        facts: dict[str, float]
        low: list[str]
        reference_time: datetime

    class ConsolidationReviewed(Aggregate.Event):
        """An LLM reviewed the agent's recent facts (ADR-0030). ``input_digest`` hashes the
        prompt it was given (the same input is never sent again), ``llm_output`` is its raw
        answer (a replay never asks again; an answer with no pattern is recorded too), and
        ``pattern_ids`` the ``PatternObserved`` ids it stands behind. Version 2 added
        ``model``: the provider that reviewed (ADR-0052; ``None`` for version-1 events)."""

        agent_id: str
        method: str
        input_digest: str
        llm_output: str
        pattern_ids: list[str]
        model: str | None

        class_version = 2
        upcast_v1_v2 = staticmethod(_no_model)

    @staticmethod
    def create_id(agent_id: str) -> UUID:  # type: ignore[override]
        return agent_jobs_id(agent_id)

    @event(Opened)
    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        self.feedback_sequence = 0
        self.fact_importance: dict[str, float] = {}
        self.entity_importance: dict[str, float] = {}
        # pattern_id -> [text, fact_ids, confidence]: the patterns standing now
        self.patterns: dict[str, list[Any]] = {}

    def observe_retrievals(
        self, counts: dict[str, int], last_at: dict[str, str], notices: int, through_sequence: int
    ) -> bool:
        """Record notices after ``feedback_sequence`` (False, nothing emitted, otherwise)."""
        if through_sequence <= self.feedback_sequence or notices <= 0:
            return False
        self._retrievals_observed(
            agent_id=self.agent_id, counts=dict(sorted(counts.items())),
            last_at=dict(sorted(last_at.items())), notices=notices,
            through_sequence=through_sequence,
        )
        return True

    @event(RetrievalsObserved)
    def _retrievals_observed(
        self, agent_id: str, counts: dict[str, int], last_at: dict[str, str], notices: int,
        through_sequence: int,
    ) -> None:
        self.feedback_sequence = through_sequence

    def assess_importance(
        self, method: str, facts: dict[str, float], entities: dict[str, float],
        reference_time: datetime,
    ) -> bool:
        """Record the scores that differ from the last assessment (False if none do)."""
        changed = {k: v for k, v in sorted(facts.items()) if self.fact_importance.get(k) != v}
        changed_e = {
            k: v for k, v in sorted(entities.items()) if self.entity_importance.get(k) != v
        }
        if not changed and not changed_e:
            return False
        self._importance_assessed(
            agent_id=self.agent_id, method=method, facts=changed, entities=changed_e,
            reference_time=reference_time,
        )
        return True

    @event(ImportanceAssessed)
    def _importance_assessed(
        self, agent_id: str, method: str, facts: dict[str, float], entities: dict[str, float],
        reference_time: datetime,
    ) -> None:
        self.fact_importance.update(facts)
        self.entity_importance.update(entities)


    def observe_pattern(
        self, pattern_id: str, kind: str, text: str, fact_ids: list[str],
        message_ids: list[str], confidence: float, method: str, llm_output: str | None = None,
    ) -> bool:
        """Record a pattern that is new or changed (False if it stands as it is)."""
        fact_ids = sorted(set(fact_ids))
        if self.patterns.get(pattern_id) == [text, fact_ids, confidence]:
            return False
        self._pattern_observed(
            agent_id=self.agent_id, pattern_id=pattern_id, kind=kind, text=text,
            fact_ids=fact_ids, message_ids=sorted(set(message_ids)), confidence=confidence,
            method=method, llm_output=llm_output,
        )
        return True

    @event(PatternObserved)
    def _pattern_observed(
        self, agent_id: str, pattern_id: str, kind: str, text: str, fact_ids: list[str],
        message_ids: list[str], confidence: float, method: str, llm_output: str | None,
    ) -> None:
        self.patterns[pattern_id] = [text, fact_ids, confidence]

    def retire_pattern(self, pattern_id: str, reason: str) -> bool:
        if pattern_id not in self.patterns:
            return False
        self._pattern_retired(agent_id=self.agent_id, pattern_id=pattern_id, reason=reason)
        return True

    @event(PatternRetired)
    def _pattern_retired(self, agent_id: str, pattern_id: str, reason: str) -> None:
        self.patterns.pop(pattern_id, None)


    # ----- ADR-0022: communities, profiles, vitality --------------------------------------
    # State added after ADR-0019: a snapshot taken before has no such attribute, hence
    # ``state_of`` (setdefault) instead of reading the attribute.

    def state_of(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.__dict__.setdefault(name, {})
        return found

    def detect_community(self, community_id: str, members: list[str], label: str,
                         method: str) -> bool:
        """Record a community not standing yet (False if it stands, same members)."""
        members = sorted(set(members))
        if self.state_of("communities").get(community_id) == members:
            return False
        self._community_detected(agent_id=self.agent_id, community_id=community_id,
                                 members=members, label=label, method=method)
        return True

    @event(CommunityDetected)
    def _community_detected(self, agent_id: str, community_id: str, members: list[str],
                            label: str, method: str) -> None:
        self.state_of("communities")[community_id] = list(members)

    def dissolve_community(self, community_id: str, reason: str) -> bool:
        if community_id not in self.state_of("communities"):
            return False
        self._community_dissolved(agent_id=self.agent_id, community_id=community_id,
                                  reason=reason)
        return True

    @event(CommunityDissolved)
    def _community_dissolved(self, agent_id: str, community_id: str, reason: str) -> None:
        self.state_of("communities").pop(community_id, None)

    def refresh_profile(self, entity_key: str, text: str, method: str, fact_ids: list[str],
                        reference_time: datetime, llm_output: str | None = None,
                        model: str | None = None) -> bool:
        """Record a profile unless the entity already has this text from these facts."""
        fact_ids = sorted(set(fact_ids))
        if self.state_of("profiles").get(entity_key, [None, None, None])[1:] == [text, fact_ids]:
            return False
        self._profile_refreshed(agent_id=self.agent_id, entity_key=entity_key, text=text,
                                method=method, fact_ids=fact_ids, llm_output=llm_output,
                                reference_time=reference_time, model=model)
        return True

    @event(ProfileRefreshed)
    def _profile_refreshed(self, agent_id: str, entity_key: str, text: str, method: str,
                           fact_ids: list[str], llm_output: str | None,
                           reference_time: datetime, model: str | None) -> None:
        # entity_key -> [reference time (ISO), text, fact ids]
        self.state_of("profiles")[entity_key] = [reference_time.isoformat(), text, list(fact_ids)]

    def assess_vitality(self, method: str, scores: dict[str, float], low: set[str],
                        reference_time: datetime) -> bool:
        """Record the facts whose score bucket (``domain.vitality.bucket_of``) or low flag
        changed (False if none did): a score drifting inside its bucket emits nothing."""
        known = self.state_of("vitality")
        changed = {k: v for k, v in sorted(scores.items())
                   if known.get(k) != [bucket_of(v), k in low]}
        if not changed:
            return False
        self._vitality_assessed(agent_id=self.agent_id, method=method, facts=changed,
                                low=sorted(k for k in changed if k in low),
                                reference_time=reference_time)
        return True

    @event(FactVitalityAssessed)
    def _vitality_assessed(self, agent_id: str, method: str, facts: dict[str, float],
                           low: list[str], reference_time: datetime) -> None:
        known = self.state_of("vitality")
        flagged = set(low)
        for fact_id, score in facts.items():
            known[fact_id] = [bucket_of(score), fact_id in flagged]


    def review_consolidation(self, method: str, input_digest: str, llm_output: str,
                             pattern_ids: list[str], model: str | None = None) -> bool:
        """Record an LLM review unless this input was reviewed with this outcome already."""
        pattern_ids = sorted(set(pattern_ids))
        if self.state_of("consolidation_llm").get("review") == [input_digest, pattern_ids]:
            return False
        self._consolidation_reviewed(agent_id=self.agent_id, method=method,
                                     input_digest=input_digest, llm_output=llm_output,
                                     pattern_ids=pattern_ids, model=model)
        return True

    @event(ConsolidationReviewed)
    def _consolidation_reviewed(self, agent_id: str, method: str, input_digest: str,
                                llm_output: str, pattern_ids: list[str],
                                model: str | None) -> None:
        self.state_of("consolidation_llm")["review"] = [input_digest, list(pattern_ids)]


