"""Crypto-shredding (issue 11 item 3, ADR-0018): events are encrypted per agent; erasing an
agent destroys its key and every derived copy, and a raw dump of the database holds none of
its text afterwards — while another agent is untouched and rebuild still works.

Real PostgreSQL, real projectors, ``pg_dump`` from the embedded PostgreSQL build; the hashing
embedder and the offline extractor.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime

import psycopg
import pytest
from eventsourcing.application import Application
from psycopg import sql

from engramdb.domain.aggregate import MessageRecord
from engramdb.domain.erasure import AgentErasedError, UndecryptableEvent
from engramdb.domain.keys import agent_aggregate_id
from engramdb.infra.data_keys import DataKeys
from engramdb.infra.embedded_postgres import pg_bin_dir
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.management.models import NotFoundError
from engramdb.services.memory.facade import Memory

A_TEXTS = ["Zorblatt", "Quenwick", "Pellucidora"]  # distinctive words of agent A's turns
B_TEXT = "Glimmerfruit"
LEGACY = "Oldmossbury"  # a turn of A stored unencrypted, as before encryption existed


def _dump(url: str, schema: str) -> str:
    """A raw dump of the schema (data of every table), as an operator would take it."""
    out = subprocess.run(
        [str(pg_bin_dir() / "pg_dump"), "--dbname", url, "--schema", schema, "--data-only"],
        check=True, capture_output=True, text=True, timeout=60,
    )
    return out.stdout


def _found(dump: str, word: str) -> bool:
    """The word in clear, or inside a bytea column (pg_dump writes those as hex)."""
    return word in dump or word.encode().hex() in dump


@pytest.fixture
def memory(fresh_schema):  # noqa: ANN001, ANN201 - pytest fixture
    schema_env = fresh_schema("erase")
    with Memory.open(env=schema_env.env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        mem.app.snapshot_every = 2  # type: ignore[misc]  # so A has snapshots to erase
        yield mem


def _legacy_turn(memory: Memory, agent: str) -> None:
    """A message record stored by the library's plain mapper (no encryption): old data."""
    plain = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"}).mapper
    record = MessageRecord(agent_id=agent, message_id="legacy-1", session_id=None, speaker="Ana",
                           text=f"I grew up in {LEGACY}.", occurred_at=datetime.now(UTC),
                           metadata={})
    memory.app.recorder.insert_events([plain.to_stored_event(e) for e in record.collect_events()])


def test_erase_agent_leaves_no_text_in_a_raw_dump(memory: Memory) -> None:
    a, b = "erase-a", "erase-b"
    _legacy_turn(memory, a)
    for i, word in enumerate(A_TEXTS):
        memory.write(a, f"I live in {word} and love {word} tea.", speaker="Ana", message_id=f"a{i}")
    memory.write(b, f"I love {B_TEXT}.", speaker="Bo", message_id="b1")
    memory.wait_for_projections()
    url, schema = memory.database.url, memory.schema

    before = _dump(url, schema)
    assert all(_found(before, w) for w in [*A_TEXTS, LEGACY, B_TEXT])  # the scan sees them
    events = sql.Identifier(schema, memory.app.recorder.events_table_name)
    with psycopg.connect(url) as conn:
        states = [bytes(r[0]) for r in conn.execute(sql.SQL("SELECT state FROM {}").format(events))]
    assert not any(w.encode() in s for s in states for w in A_TEXTS + [B_TEXT])  # encrypted
    assert any(LEGACY.encode() in s for s in states)  # the legacy turn is in clear...
    assert [m.message_id for m in memory.list_messages(a).items][0] == "legacy-1"  # ...and loads

    snapshots = sql.Identifier(schema, memory.app.snapshots.recorder.events_table_name)  # type: ignore[union-attr]
    a_snapshots = sql.SQL("SELECT state FROM {} WHERE originator_id = %s").format(snapshots)
    with psycopg.connect(url) as conn:
        snaps = [bytes(r[0]) for r in conn.execute(a_snapshots, (agent_aggregate_id(a),))]
    assert snaps and all(s.startswith(b"\x00ek1") for s in snaps)  # snapshots encrypted too

    result = memory.erase_agent(a, actor="dpo@example.org")
    assert not result.already_erased and result.clear_events_scrubbed == 1
    assert result.aggregates == 1 + 1 + len(A_TEXTS)  # agent + legacy record + 3 records
    memory.wait_for_projections(result.position)

    with psycopg.connect(url) as conn:
        assert conn.execute(a_snapshots, (agent_aggregate_id(a),)).fetchall() == []
    after = _dump(url, schema)
    assert not [w for w in [*A_TEXTS, LEGACY] if _found(after, w)]
    assert _found(after, B_TEXT)  # the other agent's read models are intact

    # retrieve, lists, history: nothing of A, and history says erased
    assert not memory.retrieve(a, f"where does Ana live {A_TEXTS[0]}").facts
    assert memory.list_messages(a).items == [] and memory.list_facts(a).items == []
    assert a not in [x.agent_id for x in memory.list_agents().items]
    assert [h.decision for h in memory.history(a)] == ["ERASE"]
    assert memory.history(a)[0].decided_by["actor"] == "dpo@example.org"
    assert memory.facts_as_of(a, datetime.now(UTC)) == []
    with pytest.raises(AgentErasedError, match="new agent id"):
        memory.write(a, "I am back", message_id="a-new")
    with pytest.raises(AgentErasedError):
        memory.app.repository.get(agent_aggregate_id(a))  # the log's fold says so too

    # B unaffected
    hit = memory.retrieve(b, f"what does Bo love {B_TEXT}")
    assert any(B_TEXT in f.fact_text for f in hit.facts)
    memory.write(b, "I also love tea.", speaker="Bo", message_id="b2")

    # idempotent; an unknown agent is a NotFoundError
    again = memory.erase_agent(a)
    assert again.already_erased and again.position == 0
    with pytest.raises(NotFoundError):
        memory.erase_agent("never-seen")

    # a new process (no cached keys): rebuild skips A's unreadable events, B's rows return
    DataKeys._caches.clear()
    report = memory.rebuild()
    assert report is not None
    assert memory.list_messages(a).items == []
    assert [m.message_id for m in memory.list_messages(b).items] == ["b1", "b2"]
    rebuilt = _dump(url, schema)
    assert not [w for w in [*A_TEXTS, LEGACY] if _found(rebuilt, w)] and _found(rebuilt, B_TEXT)
    assert all(
        isinstance(e, UndecryptableEvent) or type(e).__name__ == "Erased"
        for e in memory.app.agent_events(a)
    )



def test_ingest_drops_turns_of_an_erased_agent_and_the_stream_has_a_retention(
    fresh_schema, nats_url: str  # noqa: ANN001 - pytest fixture
) -> None:
    """A turn published for an erased agent is acked without being stored or dead-lettered
    (a dead letter would be a new copy of its text); the message stream expires turns."""
    import nats
    from test_ingest import Collector, _dead_letters, _publish, run_async, start_ingest, wait_until
    from test_write_pipeline import extraction_json, fact, scripted_extractor

    from engramdb.services.management.erase import erase_agent
    from engramdb.services.memory.event_log import EventLog
    from engramdb.services.write.messages import ConversationMessage, messages_stream_name
    from engramdb.services.write.pipeline import WritePipeline

    _schema, env = fresh_schema("erase_ingest")
    app = EventLog(env)
    prefix = f"t{_schema[-10:]}"
    gone, kept = f"gone-{prefix}", f"kept-{prefix}"
    texts = {"gone-1": "I like Zorblatt.", "gone-2": "I like Quenwick.", "kept-1": "I like tea."}
    extractor, _ = scripted_extractor(
        {t: extraction_json(fact(f"Ana likes {t.split()[-1][:-1]}")) for t in texts.values()}
    )
    pipeline = WritePipeline(app, extractor)
    try:
        pipeline.write(ConversationMessage(agent_id=gone, message_id="gone-1", speaker="Ana",
                                           text=texts["gone-1"]))
        erase_agent(pipeline, gone, "test", "python")
        run_async(_publish(nats_url, prefix, [
            ConversationMessage(agent_id=gone, message_id="gone-2", speaker="Ana", text=texts["gone-2"]),
            ConversationMessage(agent_id=kept, message_id="kept-1", speaker="Ana", text=texts["kept-1"]),
        ]))
        collector = Collector()
        runner = start_ingest(nats_url, pipeline, prefix, collector, max_deliver=2, nack_delay=0.05)

        async def consumer_settled() -> tuple[bool, float]:
            nc = await nats.connect(nats_url)
            try:
                js = nc.jetstream()
                infos = await js.consumers_info(messages_stream_name(prefix))  # one per partition
                stream = await js.stream_info(messages_stream_name(prefix))
                settled = all(i.num_pending == 0 and i.num_ack_pending == 0 for i in infos)
                return bool(infos) and settled, stream.config.max_age
            finally:
                await nc.close()

        try:
            wait_until(lambda: [r.message_id for r in collector.results] == ["kept-1"], what="kept-1")
            wait_until(lambda: run_async(consumer_settled())[0], what="both turns acked")
        finally:
            runner.stop()
        assert run_async(_dead_letters(nats_url, prefix)) == []
        assert [r.message_id for r in collector.results] == ["kept-1"]
        assert run_async(consumer_settled())[1] == 7 * 86400  # ENGRAMDB_NATS_MESSAGES_MAX_AGE_DAYS
        assert app.message_record(gone, "gone-2") is None  # nothing of it was stored
    finally:
        app.close()
