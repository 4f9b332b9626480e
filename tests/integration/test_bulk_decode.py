"""The rebuild's log reader (ADR-0032): ``BulkDecoder`` gives the mapper's events field for
field, and ``LogStream`` split into groups of agents partitions the log by agent — clear
(pre-encryption) events included — in notification order.

Real PostgreSQL; events from ``test_rebuild.drive`` (every event kind) plus message records
stored in clear by the library's plain mapper, as before encryption existed.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from test_rebuild import drive

from engramdb.domain.aggregate import MessageRecord
from engramdb.domain.keys import agent_aggregate_id
from engramdb.infra.bulk_decode import BulkDecoder
from engramdb.infra.crypto_mapper import MAGIC
from engramdb.projections.log_stream import LogStream, group_of
from engramdb.projections.positions import _conninfo
from engramdb.services.memory.event_log import EventLog

AGENTS = ("agent-a", "agent-b")


def _legacy_turn(app: EventLog, agent: str, message_id: str) -> None:
    """A recorded and processed message stored without encryption: ``Processed`` names no
    agent, so its group comes from the record's first event."""
    plain = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}).mapper
    record = MessageRecord(agent_id=agent, message_id=message_id, session_id=None,
                           speaker="Ana", text="an old turn", occurred_at=datetime.now(UTC),
                           metadata={})
    record.complete({"extractor": "test"}, {}, None, None, 0, {})
    app.recorder.insert_events([plain.to_stored_event(e) for e in record.collect_events()])


def _log(app: EventLog, env: dict[str, str]) -> tuple[list[Any], dict[UUID, str]]:
    drive(app, "agent-a", 9)
    _legacy_turn(app, "agent-b", "legacy-b")
    drive(app, "agent-b", 5)
    _legacy_turn(app, "agent-a", "legacy-a")
    stored = app.recorder.select_notifications(start=1, limit=100_000)
    owner: dict[UUID, str] = {}  # originator -> agent, from a fresh app's mapper
    reader = EventLog(env)
    try:
        for n in stored:
            event = reader.mapper.to_domain_event(n)
            agent = event.__dict__.get("agent_id")
            if isinstance(agent, str):
                owner.setdefault(n.originator_id, agent)
        for agent in AGENTS:
            owner.setdefault(agent_aggregate_id(agent), agent)
    finally:
        reader.close()
    return stored, owner


def test_bulk_decode_gives_the_mappers_events(fresh_schema: Any) -> None:
    _, env = fresh_schema("bd")
    app = EventLog(env)
    reader = EventLog(env)  # its own key cache, as in a rebuild's process
    try:
        stored, _ = _log(app, env)
        decoder = BulkDecoder(reader.mapper)
        assert decoder.fast
        clear = 0
        for n in stored:
            expected = app.mapper.to_domain_event(n)
            got = decoder.decode(n.originator_id, n.originator_version, n.topic, n.state)
            assert type(got) is type(expected), n.topic
            assert got.__dict__ == expected.__dict__, n.topic
            clear += not bytes(n.state).startswith(MAGIC)
        assert clear == 4 and decoder.fast_events == len(stored) - clear
        kinds = {n.topic.rsplit(".", 1)[-1] for n in stored}
        assert len(kinds) > 20  # every event kind drive() writes, snapshots excepted
    finally:
        reader.close()
        app.close()


def test_log_stream_groups_partition_the_log_by_agent(fresh_schema: Any) -> None:
    _, env = fresh_schema("ls")
    app = EventLog(env)
    try:
        stored, owner = _log(app, env)
        order = [(n.originator_id, n.originator_version) for n in stored]
        stop = stored[-1].id
        for groups in (1, 3, 8):
            seen: list[tuple[UUID, int]] = []
            for group in range(groups):
                stream = LogStream(app, _conninfo(env), stop, page_size=4)
                ids = [(e.originator_id, e.originator_version)
                       for page in stream.pages(groups, group) for e in page]
                assert ids == sorted(ids, key=order.index)  # notification order
                for oid, _ in ids:
                    assert group_of(agent_aggregate_id(owner[oid]), groups) == group
                seen += ids
            assert sorted(seen, key=order.index) == order, groups
    finally:
        app.close()
