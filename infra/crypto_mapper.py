"""The event mapper that encrypts every stored event with its agent's data key (ADR-0018).

Why at the mapper and not per field: eventsourcing turns every domain event and snapshot
into bytes in ``Mapper.to_stored_event`` and back in ``to_domain_event``; the write path, the
projection runners, rebuild and audit all go through the application's mapper. Encrypting
the whole serialised state there covers message text, fact text, entity names, extractor
output and any event class added later, with nothing to list and nothing to forget.

Stored form of an encrypted state: ``MAGIC`` (4 bytes, starting with NUL, which no JSON
state can) + the key id (16 bytes: the agent aggregate's id) + a 12-byte random nonce +
AES-GCM ciphertext and tag, authenticated together with the event's originator id and
version (a ciphertext moved to another event does not decrypt). A state without ``MAGIC`` is
an event stored before encryption existed and is read exactly as before.

Which key: the agent's. Events that carry ``agent_id`` (``Opened``, ``Recorded``, snapshots)
name it; other ``AgentMemory`` events have the agent aggregate's id as originator, which IS
the key id; other events of a message record find it from the record's first stored event
(remembered per originator in process, so normally no query). The ``Erased`` marker is
stored in clear: it holds no personal data and every process must be able to read it.

Reading an event whose key is destroyed gives an ``UndecryptableEvent``; reading the
``Erased`` marker makes this process drop the key from its cache at once.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any
from uuid import UUID

from cryptography.exceptions import InvalidTag
from eventsourcing.domain import Snapshot
from eventsourcing.persistence import Mapper, StoredEvent
from eventsourcing.utils import get_topic
from psycopg import sql

from engramdb.domain.aggregate import AgentMemory
from engramdb.domain.erasure import UndecryptableEvent
from engramdb.domain.keys import agent_aggregate_id
from engramdb.infra.data_keys import DataKeys, new_nonce

MAGIC = b"\x00ek1"
_HEAD = len(MAGIC) + 16 + 12
_MAX_OWNERS = 100_000
log = logging.getLogger(__name__)


def _aad(originator_id: Any, version: int) -> bytes:
    return f"{originator_id}:{version}".encode()


def key_id_of(state: bytes) -> UUID | None:
    """The key id an encrypted state names, or None for a clear (legacy or marker) state."""
    if not state.startswith(MAGIC) or len(state) < len(MAGIC) + 16:
        return None
    return UUID(bytes=bytes(state[len(MAGIC) : len(MAGIC) + 16]))


class AgentCipherMapper(Mapper[UUID]):
    """``Mapper`` that encrypts per agent; ``attach`` gives it the key table and event table."""

    keys: DataKeys | None = None
    events_table: sql.Composable | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._owners: dict[Any, UUID] = {}

    def attach(self, keys: DataKeys, events_table: sql.Composable) -> None:
        self.keys = keys
        self.events_table = events_table

    # ----- writing ---------------------------------------------------------------------

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        stored = super().to_stored_event(domain_event)
        if self.keys is None or isinstance(domain_event, AgentMemory.Erased):
            return stored
        key_id = self._key_id(domain_event)
        if key_id is None:
            log.warning("no agent for %s: stored unencrypted", get_topic(type(domain_event)))
            return stored
        agent_id = domain_event.__dict__.get("agent_id")
        what = f"agent {agent_id!r}" if isinstance(agent_id, str) else None
        nonce = new_nonce()
        sealed = self.keys.for_write(key_id, what).encrypt(
            nonce, stored.state, _aad(stored.originator_id, stored.originator_version)
        )
        return dataclasses.replace(stored, state=MAGIC + key_id.bytes + nonce + sealed)

    def _key_id(self, domain_event: Any) -> UUID | None:
        oid = domain_event.originator_id
        known = self._owners.get(oid)
        if known is not None:
            return known
        state = domain_event.__dict__
        if isinstance(domain_event, Snapshot):
            state = state.get("state") or {}
        agent_id = state.get("agent_id")
        if isinstance(agent_id, str):
            key_id: UUID | None = agent_aggregate_id(agent_id)
        elif isinstance(domain_event, AgentMemory.Event):
            key_id = oid
        else:
            key_id = self._owner_from_log(oid)
        if key_id is not None:
            self._remember(oid, key_id)
        return key_id

    def _owner_from_log(self, originator_id: Any) -> UUID | None:
        """The key of an aggregate's first stored event (encrypted: its key id; stored in
        clear before encryption existed: the agent id it names)."""
        if self.keys is None or self.events_table is None:
            return None
        with self.keys.datastore.transaction(commit=False) as curs:
            curs.execute(
                sql.SQL(
                    "SELECT state FROM {} WHERE originator_id = %s "
                    "ORDER BY originator_version LIMIT 1"
                ).format(self.events_table),
                (originator_id,),
            )
            row = curs.fetchone()
        if row is None:
            return None
        state = bytes(row["state"])
        key_id = key_id_of(state)
        if key_id is not None:
            return key_id
        try:
            agent_id = json.loads(state).get("agent_id")
        except ValueError:
            return None
        return agent_aggregate_id(agent_id) if isinstance(agent_id, str) else None

    def _remember(self, originator_id: Any, key_id: UUID) -> None:
        if len(self._owners) >= _MAX_OWNERS:
            self._owners.clear()
        self._owners[originator_id] = key_id

    # ----- reading ---------------------------------------------------------------------

    def to_domain_event(self, stored_event: StoredEvent) -> Any:
        state = stored_event.state
        key_id = key_id_of(state)
        if key_id is None:
            event = super().to_domain_event(stored_event)
            if self.keys is not None and isinstance(event, AgentMemory.Erased):
                self.keys.forget(event.originator_id)
            return event
        self._remember(stored_event.originator_id, key_id)
        key = self.keys.for_read(key_id) if self.keys is not None else None
        if key is not None:
            try:
                plain = key.decrypt(
                    bytes(state[len(MAGIC) + 16 : _HEAD]),
                    bytes(state[_HEAD:]),
                    _aad(stored_event.originator_id, stored_event.originator_version),
                )
            except InvalidTag:
                plain = None  # scrubbed at erasure (or tampered with): unreadable either way
            if plain is not None:
                return super().to_domain_event(dataclasses.replace(stored_event, state=plain))
        return UndecryptableEvent(
            originator_id=UUID(str(stored_event.originator_id)),
            originator_version=stored_event.originator_version,
            topic=stored_event.topic,
        )
