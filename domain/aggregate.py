"""The agent's memory as an event-sourced aggregate, and the per-message record.

``AgentMemory`` is the consistency boundary: reconciliation must see every active fact of the
agent to choose ADD / UPDATE / NOOP / DELETE, and optimistic concurrency on this aggregate is
what makes a check-then-insert duplicate impossible. Its state is kept as small as the
invariants need — active facts (subject, attribute, fingerprint), entity keys and aliases —
because it is loaded for every message; everything else lives in the read models.

``MessageRecord`` is one aggregate per (agent, message id). It is created with the
``Recorded`` event, so a second delivery of the same message collides on version 1 and
becomes a no-op; it also keeps what the extractor answered, so no LLM output is lost.

Events are declared as classes so their attributes are typed for every reader (folds,
projectors, audit). Their stored form is what it was when eventsourcing derived them from the
decorated methods: same topics (``<module>:<Aggregate>.<Event>``), same field names in the
same order — ``tests/integration/test_event_format.py`` pins both. A field added later gets a
``class_version`` and an upcaster, so events stored without it still load (``FactAdded``).
Events written before the code moved into the ``engramdb`` package carry topics under
``domain.aggregate``; ``LEGACY_MODULE_TOPIC`` is registered so they still resolve to these
classes (ADR-0007).

Why this module is long: an event's stored topic is this module's name plus the class's
qualified name, so both aggregates and their declared events must stay here; moving any of
them would change the topics of every event written from then on.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import Aggregate, event
from eventsourcing.utils import register_topic

from engramdb.domain.erasure import AgentErasedError
from engramdb.domain.errors import DecisionRejected
from engramdb.domain.extraction import STORED_ONLY_EXTRACTORS
from engramdb.domain.keys import agent_aggregate_id, fact_fingerprint, match_key, message_record_id
from engramdb.domain.payloads import FactPayload, check_sources, upcast_single_source

# Index positions inside an active-fact entry; lists (not tuples) survive JSON snapshots.
_ENTITY, _ATTRIBUTE, _FINGERPRINT = 0, 1, 2


class AgentMemory(Aggregate):
    """All memory decisions of one agent. Command methods validate, then emit one event."""

    # ----- events (field order = stored order; see the module doc) -----------------------

    class Opened(Aggregate.Created):
        agent_id: str

    class EntityRegistered(Aggregate.Event):
        entity_key: str
        display_name: str
        entity_type: str
        aliases: list[str]
        message_id: str | None
        decided_by: dict[str, Any]

    class EntityAliased(Aggregate.Event):
        entity_key: str
        alias: str
        message_id: str | None

    class EntitiesMerged(Aggregate.Event):
        merged_key: str
        into_key: str
        message_id: str | None
        reason: str

    class RelationshipObserved(Aggregate.Event):
        source_key: str
        target_key: str
        relation_type: str
        message_id: str | None
        observed_at: datetime

    class FactAdded(FactPayload, Aggregate.Event):
        """ADD: the event's fields are the ``FactPayload``. Version 2 added
        ``source_message_ids``; stored version-1 events are upcast on load."""

        class_version = 2
        upcast_v1_v2 = staticmethod(upcast_single_source)

        def apply(self, aggregate: AgentMemory) -> None:
            aggregate._activate(self)

    class _Supersedes(Aggregate.Event):
        """Declares ``supersedes_fact_id`` ahead of the payload fields (the stored order)."""

        supersedes_fact_id: str

    class FactUpdated(FactPayload, _Supersedes):
        """UPDATE: ``supersedes_fact_id`` plus the new fact's ``FactPayload`` (versions as
        ``FactAdded``)."""

        class_version = 2
        upcast_v1_v2 = staticmethod(upcast_single_source)

        def apply(self, aggregate: AgentMemory) -> None:
            aggregate._deactivate(self.supersedes_fact_id)
            aggregate._activate(self)

    class FactConfirmed(Aggregate.Event):
        fact_id: str
        message_id: str | None
        confirmed_at: datetime

    class FactRetracted(Aggregate.Event):
        fact_id: str
        message_id: str | None
        retracted_at: datetime
        reason: str
        decided_by: dict[str, Any]

    class Forgotten(Aggregate.Event):
        """"Forget everything about this agent": every fact active then ends (status
        ``forgotten``) and the agent's messages recorded until then are hidden from retrieval.
        History and as-of still show what was known before (ADR-0016)."""

        forgotten_at: datetime
        reason: str
        decided_by: dict[str, Any]

    class Erased(Aggregate.Event):
        """Crypto-shredding (ADR-0018): the agent's data key was destroyed after this event.
        Stored unencrypted and holding no personal data (the agent id and who asked), so
        audit and projectors in every process can read it; folding past it is impossible."""

        agent_id: str
        erased_at: datetime
        decided_by: dict[str, Any]

        def apply(self, aggregate: AgentMemory) -> None:
            raise AgentErasedError(f"agent {self.agent_id!r}")

    class CorrectionNoted(Aggregate.Event):
        """The user corrected a stored fact ("actually…", "não, na verdade…"): ``fact_id``
        (the UPDATE's new fact) replaces ``corrected_fact_id``; ``cue`` is the words that
        said so. Importance scoring counts it (ADR-0019); it changes no active fact."""

        fact_id: str
        corrected_fact_id: str
        message_id: str | None
        cue: str

    # Shadows the error of the same name in this class body only: methods still raise the
    # module-level ``DecisionRejected`` exception.
    class DecisionRejected(Aggregate.Event):
        message_id: str | None
        decision: dict[str, Any]
        reason: str

    @staticmethod
    def create_id(agent_id: str) -> UUID:  # type: ignore[override]
        return agent_aggregate_id(agent_id)

    @event(Opened)
    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        # fact_id -> [entity_key, attribute_key | None, fingerprint]
        self.active_facts: dict[str, list[Any]] = {}
        # fingerprint -> fact_id, for NOOP detection
        self.fingerprints: dict[str, str] = {}
        # entity_key -> [display_name, entity_type]
        self.entities: dict[str, list[str]] = {}
        # folded alias -> entity_key
        self.aliases: dict[str, str] = {}
        # merged entity_key -> surviving entity_key
        self.merged_into: dict[str, str] = {}

    # ----- queries used by the pure decision logic -------------------------------------

    def canonical_entity(self, key: str) -> str:
        seen = set()
        while key in self.merged_into and key not in seen:
            seen.add(key)
            key = self.merged_into[key]
        return key

    def has_entity(self, key: str) -> bool:
        return key in self.entities

    def is_active(self, fact_id: str) -> bool:
        return fact_id in self.active_facts

    def active_fact_with_fingerprint(self, fingerprint: str) -> str | None:
        return self.fingerprints.get(fingerprint)

    def active_facts_with_attribute(self, entity_key: str, attribute_key: str) -> list[str]:
        return [
            fid
            for fid, entry in self.active_facts.items()
            if entry[_ENTITY] == entity_key and entry[_ATTRIBUTE] == attribute_key
        ]

    def entity_for_alias(self, alias: str) -> str | None:
        return self.aliases.get(match_key(alias))

    # ----- entity commands ---------------------------------------------------------------

    def register_entity(
        self,
        entity_key: str,
        display_name: str,
        entity_type: str,
        message_id: str | None,
        decided_by: dict[str, Any],
        aliases: list[str] | None = None,
    ) -> None:
        if entity_key in self.entities or entity_key in self.merged_into:
            raise DecisionRejected(f"entity {entity_key!r} already exists for this agent")
        if ":" not in entity_key or not display_name.strip():
            raise DecisionRejected(f"malformed entity {entity_key!r} / {display_name!r}")
        self._entity_registered(
            entity_key=entity_key,
            display_name=display_name.strip(),
            entity_type=entity_type,
            aliases=sorted({a.strip() for a in (aliases or []) if a.strip()}),
            message_id=message_id,
            decided_by=decided_by,
        )

    @event(EntityRegistered)
    def _entity_registered(
        self,
        entity_key: str,
        display_name: str,
        entity_type: str,
        aliases: list[str],
        message_id: str | None,
        decided_by: dict[str, Any],
    ) -> None:
        self.entities[entity_key] = [display_name, entity_type]
        self.aliases.setdefault(match_key(display_name), entity_key)
        for alias in aliases:
            self.aliases.setdefault(match_key(alias), entity_key)

    def add_alias(self, entity_key: str, alias: str, message_id: str | None) -> None:
        entity_key = self.canonical_entity(entity_key)
        if entity_key not in self.entities:
            raise DecisionRejected(f"cannot alias unknown entity {entity_key!r}")
        owner = self.aliases.get(match_key(alias))
        if owner == entity_key or not alias.strip():
            return  # already known: nothing to decide
        self._entity_aliased(entity_key=entity_key, alias=alias.strip(), message_id=message_id)

    @event(EntityAliased)
    def _entity_aliased(self, entity_key: str, alias: str, message_id: str | None) -> None:
        self.aliases[match_key(alias)] = entity_key

    def merge_entities(
        self, merged_key: str, into_key: str, message_id: str | None, reason: str
    ) -> None:
        if merged_key == into_key or merged_key not in self.entities:
            raise DecisionRejected(f"cannot merge {merged_key!r} into {into_key!r}")
        if into_key not in self.entities:
            raise DecisionRejected(f"merge target {into_key!r} is not an entity of this agent")
        self._entities_merged(
            merged_key=merged_key, into_key=into_key, message_id=message_id, reason=reason
        )

    @event(EntitiesMerged)
    def _entities_merged(
        self, merged_key: str, into_key: str, message_id: str | None, reason: str
    ) -> None:
        self.entities.pop(merged_key, None)
        self.merged_into[merged_key] = into_key
        for alias, key in list(self.aliases.items()):
            if key == merged_key:
                self.aliases[alias] = into_key
        for entry in self.active_facts.values():
            if entry[_ENTITY] == merged_key:
                entry[_ENTITY] = into_key

    def observe_relationship(
        self,
        source_key: str,
        target_key: str,
        relation_type: str,
        message_id: str | None,
        observed_at: datetime,
    ) -> None:
        source_key, target_key = (
            self.canonical_entity(source_key),
            self.canonical_entity(target_key),
        )
        for key in (source_key, target_key):
            if key not in self.entities:
                raise DecisionRejected(f"relationship names unknown entity {key!r}")
        if source_key == target_key or not relation_type.strip():
            raise DecisionRejected("relationship needs two distinct entities and a type")
        self._relationship_observed(
            source_key=source_key,
            target_key=target_key,
            relation_type=relation_type.strip(),
            message_id=message_id,
            observed_at=observed_at,
        )

    @event(RelationshipObserved)
    def _relationship_observed(
        self,
        source_key: str,
        target_key: str,
        relation_type: str,
        message_id: str | None,
        observed_at: datetime,
    ) -> None:
        pass  # relationships live in the read model; the aggregate needs no state for them

    # ----- fact commands -----------------------------------------------------------------

    def _check_new_fact(self, fact: FactPayload) -> None:
        if fact.fact_id in self.active_facts:
            raise DecisionRejected(f"fact id {fact.fact_id!r} already exists")
        if not fact.text.strip():
            raise DecisionRejected("fact text is empty")
        for key in [fact.entity_key, *fact.linked_entities]:
            if key not in self.entities:
                raise DecisionRejected(f"fact names unknown entity {key!r}")
        problem = check_sources(fact)
        if problem is not None:
            raise DecisionRejected(problem)

    def add_fact(self, fact: FactPayload) -> None:
        """ADD. ``fact`` is built by ``domain.decisions``."""
        self._check_new_fact(fact)
        self.trigger_event(self.FactAdded, **fact.payload_fields())

    def update_fact(self, supersedes_fact_id: str, fact: FactPayload) -> None:
        """UPDATE: the new fact supersedes an active fact of this agent."""
        if supersedes_fact_id not in self.active_facts:
            raise DecisionRejected(
                f"UPDATE targets {supersedes_fact_id!r}, which is not an active fact of this agent"
            )
        self._check_new_fact(fact)
        self.trigger_event(
            self.FactUpdated, supersedes_fact_id=supersedes_fact_id, **fact.payload_fields()
        )

    def confirm_fact(self, fact_id: str, message_id: str | None, confirmed_at: datetime) -> None:
        """NOOP: the fact is already known; the repetition reinforces it."""
        if fact_id not in self.active_facts:
            raise DecisionRejected(f"NOOP targets {fact_id!r}, which is not an active fact")
        self._fact_confirmed(fact_id=fact_id, message_id=message_id, confirmed_at=confirmed_at)

    @event(FactConfirmed)
    def _fact_confirmed(self, fact_id: str, message_id: str | None, confirmed_at: datetime) -> None:
        pass

    def retract_fact(
        self,
        fact_id: str,
        message_id: str | None,
        retracted_at: datetime,
        reason: str,
        decided_by: dict[str, Any],
    ) -> None:
        """DELETE: an explicit retraction. Nothing is removed; the fact stops being active."""
        if fact_id not in self.active_facts:
            raise DecisionRejected(f"DELETE targets {fact_id!r}, which is not an active fact")
        self._fact_retracted(
            fact_id=fact_id,
            message_id=message_id,
            retracted_at=retracted_at,
            reason=reason,
            decided_by=decided_by,
        )

    @event(FactRetracted)
    def _fact_retracted(
        self,
        fact_id: str,
        message_id: str | None,
        retracted_at: datetime,
        reason: str,
        decided_by: dict[str, Any],
    ) -> None:
        self._deactivate(fact_id)

    def forget(self, forgotten_at: datetime, reason: str, decided_by: dict[str, Any]) -> None:
        """End every active fact at once (one event, whatever their number)."""
        self._forgotten(forgotten_at=forgotten_at, reason=reason, decided_by=decided_by)

    @event(Forgotten)
    def _forgotten(self, forgotten_at: datetime, reason: str, decided_by: dict[str, Any]) -> None:
        self.active_facts.clear()
        self.fingerprints.clear()

    def note_correction(
        self, fact_id: str, corrected_fact_id: str, message_id: str | None, cue: str
    ) -> None:
        """Mark ``fact_id`` as the user's correction of ``corrected_fact_id``."""
        if fact_id not in self.active_facts:
            raise DecisionRejected(f"correction names {fact_id!r}, which is not an active fact")
        self.trigger_event(
            self.CorrectionNoted, fact_id=fact_id, corrected_fact_id=corrected_fact_id,
            message_id=message_id, cue=cue,
        )

    def reject(self, message_id: str | None, decision: dict[str, Any], reason: str) -> None:
        """Record a refused decision so an audit shows what the extractor proposed and why not."""
        self._decision_rejected(message_id=message_id, decision=decision, reason=reason)

    @event(DecisionRejected)
    def _decision_rejected(
        self, message_id: str | None, decision: dict[str, Any], reason: str
    ) -> None:
        pass

    # ----- state helpers -------------------------------------------------------------------

    def _activate(self, fact: FactPayload) -> None:
        fingerprint = fact_fingerprint(fact.entity_key, fact.text)
        self.active_facts[fact.fact_id] = [fact.entity_key, fact.attribute_key, fingerprint]
        self.fingerprints[fingerprint] = fact.fact_id

    def _deactivate(self, fact_id: str) -> None:
        entry = self.active_facts.pop(fact_id, None)
        if entry is not None and self.fingerprints.get(entry[_FINGERPRINT]) == fact_id:
            del self.fingerprints[entry[_FINGERPRINT]]


#: ``FactRetracted.reason`` when reprocessing a message ended the fact (ADR-0023): a
#: replacement by a new extraction of the same turn, so the turn is NOT hidden from retrieval.
REPROCESSED = "reprocessed"
#: ``FactRetracted.reason`` when a client's fact ends at the ``valid_to`` the client gave
#: (ADR-0049): the fact ended, nobody said it was wrong, so its turns stay retrievable too.
CLIENT_VALID_TO = "valid_to given by the client"


class MessageRecord(Aggregate):
    """One conversation turn, recorded before anything else can fail, and its processing."""

    class Recorded(Aggregate.Created):
        agent_id: str
        message_id: str
        session_id: str | None
        speaker: str | None
        text: str
        occurred_at: datetime
        metadata: dict[str, Any]

    class Processed(Aggregate.Event):
        extractor: dict[str, Any]
        extraction: dict[str, Any]
        raw_output: str | None
        error: str | None
        llm_calls: int
        decisions: dict[str, int]

    class ExtractionDeferred(Aggregate.Event):
        """The LLM was unreachable (connection refused, timeout, 429, 5xx) through every
        attempt: the message stays recorded and *pending*, to be extracted when the LLM is
        back (ADR-0014). A later ``Processed`` resolves it. ``agent_id``/``message_id`` and
        ``recorded_at`` are repeated so a read model can list pending messages in order
        without the ``Recorded`` event."""

        agent_id: str
        message_id: str
        recorded_at: datetime
        reason: str
        attempts: int

    class Reprocessed(Aggregate.Event):
        """An already processed message was extracted again (ADR-0023): what the extractor
        said this time, and which facts of the earlier extraction(s) were ended for it
        (their ``FactRetracted``, reason ``reprocessed``, is in the agent's log)."""

        generation: int
        extractor: dict[str, Any]
        extraction: dict[str, Any]
        raw_output: str | None
        error: str | None
        llm_calls: int
        decisions: dict[str, int]
        ended_fact_ids: list[str]

    @staticmethod
    def create_id(agent_id: str, message_id: str, **_: Any) -> UUID:  # type: ignore[override]
        return message_record_id(agent_id, message_id)

    @event(Recorded)
    def __init__(
        self,
        agent_id: str,
        message_id: str,
        session_id: str | None,
        speaker: str | None,
        text: str,
        occurred_at: datetime,
        metadata: dict[str, Any],
    ) -> None:
        self.agent_id = agent_id
        self.message_id = message_id
        self.session_id = session_id
        self.speaker = speaker
        self.text = text
        self.occurred_at = occurred_at
        self.metadata = metadata
        self.processed = False
        self.extraction: dict[str, Any] | None = None
        self.deferrals = 0  # ExtractionDeferred events so far (0 for every older record)

    @property
    def extraction_pending(self) -> bool:
        """Recorded, deferred by an LLM outage, and not processed since."""
        return getattr(self, "deferrals", 0) > 0 and not self.processed

    def defer_extraction(self, reason: str, attempts: int) -> None:
        """Record that extraction could not run now (an LLM outage); the message stays pending."""
        if self.processed:
            raise DecisionRejected(f"message {self.message_id!r} was already processed")
        self._extraction_deferred(
            agent_id=self.agent_id,
            message_id=self.message_id,
            recorded_at=self.created_on,
            reason=reason,
            attempts=attempts,
        )

    @event(ExtractionDeferred)
    def _extraction_deferred(
        self, agent_id: str, message_id: str, recorded_at: datetime, reason: str, attempts: int
    ) -> None:
        self.deferrals = getattr(self, "deferrals", 0) + 1

    def complete(
        self,
        extractor: dict[str, Any],
        extraction: dict[str, Any],
        raw_output: str | None,
        error: str | None,
        llm_calls: int,
        decisions: dict[str, int],
    ) -> None:
        if self.processed:
            raise DecisionRejected(f"message {self.message_id!r} was already processed")
        self._processed(
            extractor=extractor,
            extraction=extraction,
            raw_output=raw_output,
            error=error,
            llm_calls=llm_calls,
            decisions=decisions,
        )

    @event(Processed)
    def _processed(
        self,
        extractor: dict[str, Any],
        extraction: dict[str, Any],
        raw_output: str | None,
        error: str | None,
        llm_calls: int,
        decisions: dict[str, int],
    ) -> None:
        self.processed = True
        self.extraction = extraction
        self.extractor_name = extractor.get("extractor")

    @property
    def stored_only(self) -> bool:
        """Written with ``infer=False`` (ADR-0049): the caller asked for no extraction, so a
        reprocess must not extract it either. ``"none"`` is the name issue 24's first
        record-only path stored."""
        return getattr(self, "extractor_name", None) in STORED_ONLY_EXTRACTORS

    @property
    def generation(self) -> int:
        """How many times the message was reprocessed (0 for every older record)."""
        return getattr(self, "reprocessings", 0)

    def reprocessed(
        self,
        extractor: dict[str, Any],
        extraction: dict[str, Any],
        raw_output: str | None,
        error: str | None,
        llm_calls: int,
        decisions: dict[str, int],
        ended_fact_ids: list[str],
    ) -> None:
        if not self.processed:
            raise DecisionRejected(f"message {self.message_id!r} was never processed")
        self._reprocessed(
            generation=self.generation + 1, extractor=extractor, extraction=extraction,
            raw_output=raw_output, error=error, llm_calls=llm_calls, decisions=decisions,
            ended_fact_ids=ended_fact_ids,
        )

    @event(Reprocessed)
    def _reprocessed(
        self,
        generation: int,
        extractor: dict[str, Any],
        extraction: dict[str, Any],
        raw_output: str | None,
        error: str | None,
        llm_calls: int,
        decisions: dict[str, int],
        ended_fact_ids: list[str],
    ) -> None:
        self.reprocessings = generation
        self.extraction = extraction
        self.extractor_name = extractor.get("extractor")


# Topics of events stored before ADR-0007 name the module ``domain.aggregate``; eventsourcing
# resolves a topic's module through this cache before importing anything, so old events (and
# snapshots, and ``originator_topic`` of created events) load as instances of these classes.
LEGACY_MODULE_TOPIC = "domain.aggregate"
register_topic(LEGACY_MODULE_TOPIC, sys.modules[__name__])
