"""The eventsourcing application that owns the event log of every agent's memory.

Thin on purpose: the aggregates decide; this class only stores. Two things differ from the
library's defaults, both so that saving a message's decisions costs the same at 50k facts as
at 100 (ADR-0004):
- the aggregate cache is on and returns the cached object itself (no deepcopy of a large
  state per message) without asking the store for newer events first (no fast-forward):
  callers serialise writes per agent, and a save that conflicts because another process
  wrote meanwhile evicts the cached object, reloads and re-decides;
- snapshots are taken from the in-memory aggregate just saved, not by replaying the log.

Every event and snapshot is encrypted with its agent's data key by ``AgentCipherMapper``
(crypto-shredding, ADR-0018); the key table is created with the application.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.application import Application, ProcessingEvent
from eventsourcing.domain import Snapshot
from eventsourcing.persistence import Mapper
from psycopg import sql

from engramdb.domain.aggregate import AgentMemory, MessageRecord
from engramdb.domain.erasure import AgentErasedError
from engramdb.domain.jobs import AgentJobs
from engramdb.domain.keys import agent_aggregate_id, message_record_id
from engramdb.infra.crypto_mapper import AgentCipherMapper
from engramdb.infra.data_keys import DataKeys

APPLICATION_NAME = "engramdb"
DEFAULT_ENV: dict[str, str] = {
    "AGGREGATE_CACHE_MAXSIZE": "2000",
    "AGGREGATE_CACHE_FASTFORWARD": "n",  # a stale cache only costs a conflict + reload
    "DEEPCOPY_FROM_AGGREGATE_CACHE": "n",
    "IS_SNAPSHOTTING_ENABLED": "y",
}


class EventLog(Application[UUID]):
    name = APPLICATION_NAME
    snapshot_every: ClassVar[int] = 1000

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        merged = dict(DEFAULT_ENV)
        merged.update(env or {})
        super().__init__(merged)
        self.keys = DataKeys(self.recorder.datastore)  # type: ignore[attr-defined]
        self.keys.create_table()
        assert isinstance(self.mapper, AgentCipherMapper)
        datastore = self.recorder.datastore  # type: ignore[attr-defined]
        self.mapper.attach(
            self.keys, sql.Identifier(datastore.schema, self.recorder.events_table_name)  # type: ignore[attr-defined]
        )

    def construct_mapper(self) -> Mapper[UUID]:
        """The per-agent encrypting mapper (key table attached once the recorder exists)."""
        return self.factory.mapper(
            transcoder=self.construct_transcoder(), mapper_class=AgentCipherMapper
        )

    def _take_snapshots(self, processing_event: ProcessingEvent[UUID]) -> None:
        if self.snapshots is None:
            return
        lowest: dict[UUID, int] = {}
        for domain_event in processing_event.events:
            oid, version = domain_event.originator_id, domain_event.originator_version
            lowest[oid] = min(version, lowest.get(oid, version))
        for oid, aggregate in processing_event.aggregates.items():
            if not isinstance(aggregate, (AgentMemory, AgentJobs)) or oid not in lowest:
                continue
            every = self.snapshot_every
            if aggregate.version // every > (lowest[oid] - 1) // every:
                self.snapshots.put([Snapshot.take(aggregate)])

    # ----- lookups ---------------------------------------------------------------------

    def agent_memory(self, agent_id: str) -> AgentMemory:
        """The agent's aggregate, opened (not yet saved) when the agent is new;
        ``AgentErasedError`` if the agent was erased."""
        if self.keys.for_read(agent_aggregate_id(agent_id)) is None and self.keys.is_erased(
            agent_aggregate_id(agent_id)
        ):
            raise AgentErasedError(f"agent {agent_id!r}")
        try:
            memory: Any = self.repository.get(agent_aggregate_id(agent_id))
        except Exception as exc:  # AggregateNotFoundError
            if type(exc).__name__ != "AggregateNotFoundError":
                raise
            return AgentMemory(agent_id=agent_id)
        assert isinstance(memory, AgentMemory)
        return memory

    def message_record(self, agent_id: str, message_id: str) -> MessageRecord | None:
        try:
            record: Any = self.repository.get(message_record_id(agent_id, message_id))
        except Exception as exc:
            if type(exc).__name__ != "AggregateNotFoundError":
                raise
            return None
        assert isinstance(record, MessageRecord)
        return record

    def forget_cached(self, *aggregate_ids: UUID) -> None:
        """Drop cached aggregates after a failed save: their in-memory state is ahead of the log."""
        cache = self.repository.cache
        if cache is None:
            return
        for aggregate_id in aggregate_ids:
            with contextlib.suppress(KeyError):
                cache.get(aggregate_id, evict=True)

    def agent_events(self, agent_id: str, **kwargs: Any) -> list[Any]:
        """Stored events of the agent aggregate (``gt``/``lte`` versions pass through)."""
        return list(self.events.get(agent_aggregate_id(agent_id), **kwargs))
