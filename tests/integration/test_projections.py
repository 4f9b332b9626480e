"""Projections against real PostgreSQL: every event kind, exactly-once, waits, model checks.

The embedder is ``HashEmbedder`` (deterministic feature hashing — a test double, not a
model) wrapped in ``CountingEmbedder`` so embed calls can be asserted.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from eventsourcing.persistence import IntegrityError, Tracking
from psycopg.rows import dict_row

from engramdb.domain.aggregate import AgentMemory, MessageRecord
from engramdb.domain.payloads import FactPayload
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.projections.embeddings import CountingEmbedder
from engramdb.projections.read_model import EmbeddingModelMismatch, bind_view
from engramdb.projections.read_models.memory.view import MemoryView
from engramdb.projections.runner import (
    ProjectionSet,
    datastore_factory,
    tracking_positions,
    wait_for_position,
)
from engramdb.services.memory.event_log import EventLog

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
BY = {"extractor": "test", "model": None, "prompt_version": None}


def fact(fid: str, entity: str, text: str, at: datetime, linked: tuple[str, ...] = (),
         attr: str | None = None, msg: str | None = "m1") -> FactPayload:
    return FactPayload(
        fact_id=fid, entity_key=entity, linked_entities=list(linked),
        attribute_key=attr, text=text, category="general", confidence=0.95,
        importance=0.5, source_message_id=msg, source_message_ids=[msg], speaker="Ana",
        valid_from=at,
        decided_by=BY,
    )


class Env:
    def __init__(self, url: str, schema: str, env: dict[str, str]) -> None:
        self.url, self.schema, self.env = url, schema, env
        self.app = EventLog(env)
        self.embedder = CountingEmbedder(HashEmbedder())
        self.projections: ProjectionSet | None = None

    def start(self) -> ProjectionSet:
        self.projections = ProjectionSet.start(EventLog, self.env, self.embedder)
        return self.projections

    def save(self, *aggregates: Any) -> int:
        return self.app.save(*aggregates)[-1].notification.id

    def sync(self, position: int) -> None:
        assert self.projections is not None
        self.projections.wait(position, timeout=20)

    def rows(self, query: str, *params: Any) -> list[dict[str, Any]]:
        with psycopg.connect(self.url, row_factory=dict_row) as conn:
            conn.execute(f'SET search_path TO "{self.schema}", public')
            return conn.execute(query, params).fetchall()


@pytest.fixture
def pg(pg_url: str, fresh_schema: Any) -> Iterator[Env]:
    schema, env = fresh_schema("proj")
    e = Env(pg_url, schema, env)
    yield e
    if e.projections is not None:
        e.projections.stop()
    e.app.close()


def test_every_event_kind_is_projected(pg: Env, agent_id: str) -> None:
    pg.start()
    mem = pg.app.agent_memory(agent_id)
    record = MessageRecord(agent_id=agent_id, message_id="m1", session_id="s1", speaker="Ana",
                           text="Ana lives in Lisbon with Rui", occurred_at=T0, metadata={"k": 1})
    mem.register_entity("person:ana", "Ana", "person", "m1", BY, aliases=["Aninha"])
    mem.register_entity("person:rui", "Rui", "person", "m1", BY)
    mem.register_entity("person:ruizinho", "Ruizinho", "person", "m1", BY)
    mem.register_entity("place:lisbon", "Lisbon", "place", "m1", BY)
    mem.add_fact(fact("f1", "person:ana", "Ana lives in Lisbon", T0, ("place:lisbon",), "residence"))
    mem.add_fact(fact("f2", "person:ruizinho", "Ruizinho likes jazz", T0, ("person:ana",)))
    mem.observe_relationship("person:ana", "person:rui", "married_to", "m1", T0)
    mem.observe_relationship("person:ana", "person:ruizinho", "married_to", "m1", T0)
    mem.observe_relationship("person:ruizinho", "person:rui", "same_as", "m1", T0)
    record.complete({"extractor": "llm", "model": "gpt", "prompt_version": "v1"}, {}, "{}", None,
                    1, {"ADD": 2})
    pg.save(mem, record)
    # second message: confirm twice, update, alias, merge, retract, reject
    t1, t2 = T0 + timedelta(days=1), T0 + timedelta(days=2)
    mem.confirm_fact("f1", "m2", t1)
    mem.confirm_fact("f1", "m3", t2)
    mem.update_fact("f1", fact("f3", "person:ana", "Ana lives in Porto", t2, (), "residence", "m3"))
    mem.add_alias("person:rui", "Ruizito", "m3")
    mem.merge_entities("person:ruizinho", "person:rui", "m3", "same person")
    mem.retract_fact("f2", "m3", t2, "not true", BY)
    mem.reject("m3", {"text": "nonsense"}, "unknown entity")
    pos = pg.save(mem)
    pg.sync(pos)

    facts = {r["fact_id"]: r for r in pg.rows("SELECT * FROM mem_facts WHERE agent_id = %s", agent_id)}
    f1, f2, f3 = facts["f1"], facts["f2"], facts["f3"]
    assert (f1["status"], f1["superseded_by"], f1["valid_to"]) == ("superseded", "f3", t2)
    assert f1["reinforcement_count"] == 2 and f1["last_confirmed_at"] == t2
    assert f1["source_message_ids"] == ["m1", "m2", "m3"]
    assert f1["invalidated_at"] == f3["recorded_at"] and f1["recorded_at"] < f3["recorded_at"]
    assert len(f1["event_versions"]) == 4  # added, confirmed x2, superseded
    assert (f3["status"], f3["supersedes_fact_id"], f3["valid_from"]) == ("active", "f1", t2)
    assert f3["valid_to"] is None and f3["embedding"] is not None
    assert (f2["status"], f2["valid_to"], f2["entity_key"]) == ("retracted", t2, "person:rui")
    assert f2["decided_by"] == BY and abs(f2["confidence"] - 0.95) < 1e-6

    links = {(r["fact_id"], r["entity_key"], r["is_primary"])
             for r in pg.rows("SELECT * FROM mem_fact_entities WHERE agent_id = %s", agent_id)}
    assert links == {("f1", "person:ana", True), ("f1", "place:lisbon", False),
                     ("f2", "person:rui", True), ("f2", "person:ana", False),
                     ("f3", "person:ana", True)}
    ents = {r["entity_key"]: r["merged_into"]
            for r in pg.rows("SELECT * FROM mem_entities WHERE agent_id = %s", agent_id)}
    assert ents == {"person:ana": None, "person:rui": None, "person:ruizinho": "person:rui",
                    "place:lisbon": None}
    aliases = {r["alias_folded"]: r["entity_key"]
               for r in pg.rows("SELECT * FROM mem_aliases WHERE agent_id = %s", agent_id)}
    assert aliases == {"ana": "person:ana", "aninha": "person:ana", "rui": "person:rui",
                       "ruizinho": "person:rui", "ruizito": "person:rui", "lisbon": "place:lisbon"}
    rels = pg.rows("SELECT * FROM mem_relationships WHERE agent_id = %s", agent_id)
    # the two married_to edges merged into one with 2 mentions; the same_as self-loop vanished
    assert [(r["source_key"], r["target_key"], r["mentions"], r["strength"]) for r in rels] == [
        ("person:ana", "person:rui", 2, 0.75)
    ]
    rej = pg.rows("SELECT * FROM mem_rejections WHERE agent_id = %s", agent_id)
    assert [(r["message_id"], r["reason"], r["decision"]) for r in rej] == [
        ("m3", "unknown entity", {"text": "nonsense"})
    ]
    msg = pg.rows("SELECT * FROM mem_messages WHERE agent_id = %s", agent_id)[0]
    assert (msg["processed"], msg["extractor"], msg["llm_calls"], msg["metadata"]) == (
        True, "llm/gpt/v1", 1, {"k": 1})
    assert msg["embedding"] is not None and msg["occurred_at"] == T0
    # texts embedded once each: 1 message + 3 distinct fact texts
    assert pg.embedder.texts == 4


def test_exactly_once_resume_and_refused_replay(pg: Env, agent_id: str) -> None:
    mem = pg.app.agent_memory(agent_id)
    mem.register_entity("person:ana", "Ana", "person", "m0", BY)
    mem.add_fact(fact("f1", "person:ana", "Ana likes tea", T0, msg="src"))
    pg.save(mem)
    confirmations = 60
    positions = []
    for i in range(confirmations):  # one save per confirmation: 60 positions in the log
        mem.confirm_fact("f1", f"m{i}", T0 + timedelta(minutes=i))
        positions.append(pg.save(mem))
    ps = pg.start()
    ps.wait(positions[10], timeout=20)
    ps.stop()  # mid-way (the runner may have gone a bit further)
    stopped_at = tracking_positions(pg.url, pg.schema)["memory"]
    assert stopped_at is not None and stopped_at >= positions[10]
    for i in range(confirmations, confirmations + 5):
        mem.confirm_fact("f1", f"m{i}", T0 + timedelta(minutes=i))
        positions.append(pg.save(mem))
    calls_before = pg.embedder.texts
    ps = pg.start()  # resumes from the tracking table
    ps.wait(positions[-1], timeout=20)
    row = pg.rows("SELECT * FROM mem_facts WHERE fact_id = 'f1' AND agent_id = %s", agent_id)[0]
    assert row["reinforcement_count"] == confirmations + 5
    assert len(row["event_versions"]) == confirmations + 6
    assert len(row["source_message_ids"]) == 1 + confirmations + 5
    assert pg.embedder.texts == calls_before  # nothing new to embed on resume

    # replaying an already-applied event is refused by the tracking row, rows untouched
    view = ps.runners["memory"].view
    event = pg.app.agent_events(agent_id)[-1]
    with pytest.raises(IntegrityError):
        view.apply(event, Tracking("engramdb", positions[-1]))
    again = pg.rows("SELECT reinforcement_count FROM mem_facts WHERE fact_id = 'f1' "
                    "AND agent_id = %s", agent_id)[0]
    assert again["reinforcement_count"] == confirmations + 5


def test_wait_for_position_from_another_connection(pg: Env, agent_id: str) -> None:
    pg.start()
    mem = pg.app.agent_memory(agent_id)
    mem.register_entity("person:ana", "Ana", "person", "m0", BY)
    pos = pg.save(mem)
    wait_for_position(pg.url, pos, timeout=20, schema=pg.schema)
    assert pg.rows("SELECT count(*) AS n FROM mem_entities WHERE agent_id = %s", agent_id)[0]["n"] == 1
    with pytest.raises(TimeoutError):
        wait_for_position(pg.url, pos + 1000, timeout=0.2, schema=pg.schema)


def test_refuses_a_different_embedding_model(pg: Env) -> None:
    pg.start().stop()
    pg.projections = None

    class Other(HashEmbedder):
        pass

    other = Other(dimensions=64)
    with pytest.raises(EmbeddingModelMismatch):
        ProjectionSet.start(EventLog, pg.env, other, "memory")


def test_agent_opened_in_message_only_save(pg: Env, agent_id: str) -> None:
    """A MessageRecord alone (no agent decisions) still advances the memory projection."""
    pg.start()
    record = MessageRecord(agent_id=agent_id, message_id="x", session_id=None, speaker=None,
                           text="hello", occurred_at=T0, metadata={})
    pos = pg.save(record)
    pg.sync(pos)
    assert tracking_positions(pg.url, pg.schema)["memory"] == pos
    assert AgentMemory  # the agent aggregate was not touched: no mem_agents row
    assert pg.rows("SELECT count(*) AS n FROM mem_agents")[0]["n"] == 0


# ----- batching: many events per transaction, tracking of the last one ----------------------


def _wipe_read_models(url: str, schema: str) -> None:
    """Drop every read-model and tracking table (the log and the embedding cache stay)."""
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s AND (tablename LIKE 'mem%%' "
            "OR tablename LIKE '%%_tracking') AND tablename <> 'mem_embedding_cache'", (schema,))]
        for table in tables:
            conn.execute(f'DROP TABLE IF EXISTS "{schema}"."{table}" CASCADE')


def test_batched_rows_equal_the_single_event_path(pg: Env) -> None:
    from test_rebuild import drive, dump  # the rebuild test's every-event-kind conversation

    last = drive(pg.app, "agent-a", 12)
    single = ProjectionSet.start(EventLog, pg.env, pg.embedder, max_batch_events=1)
    single.wait(last, timeout=30)
    last = drive(pg.app, "agent-b", 6)  # live, while running
    single.wait(last, timeout=30)
    assert all(r.view.batches == r.view.events_applied for r in single.runners.values())
    single.stop()
    expected = dump(pg.url, pg.schema)
    assert len(expected["mem_facts"]) > 10

    _wipe_read_models(pg.url, pg.schema)
    ps = pg.start()  # default batching: catches up on the whole log in a few transactions
    ps.wait(last, timeout=30)
    for runner in ps.runners.values():
        assert runner.view.events_applied >= last - 1
        assert runner.view.batches * 5 <= runner.view.events_applied  # really batched
    assert dump(pg.url, pg.schema) == expected


class _Poisoned(Exception):
    pass


def test_failure_mid_batch_rolls_back_the_batch_and_the_runner_resumes(
    pg: Env, agent_id: str
) -> None:
    from engramdb.projections.batching import BatchingProjectionRunner
    from engramdb.projections.read_model import bind_view
    from engramdb.projections.read_models import BY_NAME
    from engramdb.projections.read_models.memory import MemoryView

    MemoryProjection = BY_NAME["memory"].projection  # noqa: N806

    mem = pg.app.agent_memory(agent_id)
    mem.register_entity("person:ana", "Ana", "person", "m0", BY)
    mem.add_fact(fact("f1", "person:ana", "Ana likes tea", T0, msg="src"))
    mem.add_fact(fact("f2", "person:ana", "Ana likes jazz", T0, msg="src"))
    pg.save(mem)
    positions = []
    for i in range(30):
        mem.confirm_fact("f1", "boom" if i == 20 else f"m{i}", T0 + timedelta(minutes=i))
        positions.append(pg.save(mem))

    class Flaky(bind_view(MemoryView, pg.embedder)):  # type: ignore[misc]
        """Fails on the confirmation from message 'boom' while ``armed``."""

        armed = True

        def _fact_confirmed(self, curs: Any, e: Any) -> None:
            super()._fact_confirmed(curs, e)
            if Flaky.armed and e.message_id == "boom":
                raise _Poisoned(e.message_id)

    def run() -> BatchingProjectionRunner[Any]:
        runner: BatchingProjectionRunner[Any] = BatchingProjectionRunner(
            application_class=EventLog, projection_class=MemoryProjection,
            view_class=Flaky, env=pg.env,
        )
        return runner.__enter__()

    runner = run()
    with pytest.raises(_Poisoned):
        runner.run_forever(timeout=20)  # the processing thread's error, re-raised
    runner.__exit__(None, None, None)
    runner.view.datastore.close()
    # the whole log was one batch: nothing committed, not even the events before 'boom'
    assert tracking_positions(pg.url, pg.schema, ["memory"])["memory"] is None
    assert pg.rows("SELECT count(*) AS n FROM mem_facts")[0]["n"] == 0
    assert pg.rows("SELECT count(*) AS n FROM mem_agents")[0]["n"] == 0
    # the batch's texts were embedded in ONE call and kept although the rows rolled back
    assert (pg.embedder.calls, pg.embedder.texts) == (1, 2)

    Flaky.armed = False
    runner = run()  # resumes from the (absent) tracking position: applies everything once
    try:
        runner.wait(positions[-1], timeout=20)
        assert runner.view.batches < runner.view.events_applied
    finally:
        runner.__exit__(None, None, None)
        runner.view.datastore.close()
    row = pg.rows("SELECT * FROM mem_facts WHERE fact_id = 'f1' AND agent_id = %s", agent_id)[0]
    assert row["reinforcement_count"] == 30 and len(row["event_versions"]) == 31
    assert tracking_positions(pg.url, pg.schema, ["memory"])["memory"] == positions[-1]
    assert pg.embedder.calls == 1  # nothing re-embedded on resume


def test_batch_refused_when_it_overlaps_the_tracked_position(pg: Env, agent_id: str) -> None:
    """A batch starting at or before the recorded position is refused whole, rows untouched."""
    mem = pg.app.agent_memory(agent_id)
    mem.register_entity("person:ana", "Ana", "person", "m0", BY)
    mem.add_fact(fact("f1", "person:ana", "Ana likes tea", T0, msg="src"))
    pg.save(mem)
    for i in range(3):
        mem.confirm_fact("f1", f"m{i}", T0 + timedelta(minutes=i))
        pos = pg.save(mem)
    ps = pg.start()
    ps.wait(pos, timeout=20)
    view = ps.runners["memory"].view
    events = pg.app.agent_events(agent_id)[-2:]
    batch = [(events[0], Tracking("engramdb", pos)), (events[1], Tracking("engramdb", pos + 1))]
    with pytest.raises(IntegrityError):
        view.apply_batch(batch)
    row = pg.rows("SELECT reinforcement_count FROM mem_facts WHERE fact_id = 'f1'")[0]
    assert row["reinforcement_count"] == 3
    assert tracking_positions(pg.url, pg.schema)["memory"] == pos


def test_read_your_writes_with_batching_and_linger(pg: Env, agent_id: str) -> None:
    ps = ProjectionSet.start(EventLog, pg.env, pg.embedder, max_batch_wait=0.02)
    pg.projections = ps
    mem = pg.app.agent_memory(agent_id)
    mem.register_entity("person:ana", "Ana", "person", "m0", BY)
    for i in range(8):
        record = MessageRecord(agent_id=agent_id, message_id=f"m{i}", session_id=None,
                               speaker="Ana", text=f"note {i}", occurred_at=T0, metadata={})
        mem.add_fact(fact(f"f{i}", "person:ana", f"Ana note {i}", T0, msg=f"m{i}"))
        ps.wait(pg.save(mem, record), timeout=20)
        # visible the moment wait() returns, in both projections
        assert pg.rows("SELECT count(*) AS n FROM mem_facts")[0]["n"] == i + 1
        assert pg.rows("SELECT count(*) AS n FROM mem_messages")[0]["n"] == i + 1


def test_a_large_batch_reads_its_own_rows_not_an_earlier_insert_reply(
    pg: Env, agent_id: str
) -> None:
    """A full batch of long facts keeps the server answering while statements still go out;
    the reads inside it (tracking row, retraction's RETURNING) must get their own rows, not
    an earlier INSERT's reply ("the last operation didn't produce records (INSERT 0 1)")."""
    mem = pg.app.agent_memory(agent_id)
    mem.register_entity("person:ana", "Ana", "person", "m0", BY)
    for i in range(480):
        mem.add_fact(fact(f"f{i}", "person:ana", f"Ana note {i}: " + "words " * 500, T0))
    mem.retract_fact("f0", "m9", T0 + timedelta(days=1), "user asked", BY)
    recordings = pg.app.save(mem)
    view = datastore_factory("memory", pg.env).tracking_recorder(
        bind_view(MemoryView, pg.embedder)
    )
    try:
        events = pg.app.agent_events(agent_id)
        assert len(events) == len(recordings)
        view.apply_batch([
            (event, Tracking("engramdb", r.notification.id))
            for event, r in zip(events, recordings, strict=True)
        ])  # one transaction, one pipeline: the runner's largest batch
    finally:
        view.datastore.close()
    rows = pg.rows("SELECT fact_id, status FROM mem_facts WHERE agent_id = %s", agent_id)
    assert len(rows) == 480
    assert {r["fact_id"] for r in rows if r["status"] == "retracted"} == {"f0"}
    assert tracking_positions(pg.url, pg.schema, ["memory"])["memory"] == recordings[-1].notification.id
