"""Rebuild (bulk mode) gives the incremental projection's tables row for row, embeddings
included, without a single embedder call when the cache is warm; the runner resumes after it.

Embedder: ``HashEmbedder`` (deterministic test double) behind ``CountingEmbedder``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from engramdb.domain.aggregate import REPROCESSED, MessageRecord
from engramdb.domain.jobs import AgentJobs
from engramdb.domain.keys import agent_aggregate_id
from engramdb.domain.payloads import FactPayload
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.projections.embeddings import CountingEmbedder
from engramdb.projections.log_stream import LogStream
from engramdb.projections.positions import _conninfo
from engramdb.projections.read_models import BY_NAME
from engramdb.projections.rebuild import rebuild
from engramdb.projections.runner import ProjectionSet
from engramdb.services.memory.event_log import EventLog

T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)
BY = {"extractor": "test"}
TABLES = BY_NAME["conversation"].table_names + BY_NAME["memory"].table_names


def fact(fid: str, entity: str, text: str, at: datetime, linked: list[str] | None = None,
         msg: str = "m") -> FactPayload:
    return FactPayload(
        fact_id=fid, entity_key=entity, linked_entities=linked or [],
        attribute_key=None, text=text, category="general", confidence=0.8,
        importance=0.5, source_message_id=msg, source_message_ids=[msg], speaker=None,
        valid_from=at,
        decided_by=BY,
    )


def dump(url: str, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every read-model table (embeddings as text) and the tracking rows."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    with psycopg.connect(url) as conn:
        conn.execute(f'SET search_path TO "{schema}", public')
        for table in TABLES:
            cols = [r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                "AND table_name = %s ORDER BY ordinal_position", (schema, table))]
            select = ", ".join(f"{c}::text" if c == "embedding" else c for c in cols)
            out[table] = conn.execute(f"SELECT {select} FROM {table} ORDER BY 1, 2, 3").fetchall()
        for name in ("conversation", "memory"):
            out[f"{name}_tracking"] = conn.execute(
                f"SELECT * FROM {name}_tracking ORDER BY 1").fetchall()
    return out


def _columns(url: str, schema: str, table: str, columns: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        conn.execute(f'SET search_path TO "{schema}", public')
        return conn.execute(f"SELECT {columns} FROM {table}").fetchall()


def drive(app: EventLog, agent: str, messages: int, start: int = 0) -> int:
    """A little conversation per agent touching every event kind; returns the last position."""
    mem = app.agent_memory(agent)
    pos = 0
    for i in range(start, start + messages):
        at = T0 + timedelta(hours=i)
        rec = MessageRecord(agent_id=agent, message_id=f"m{i}", session_id="s", speaker="Ana",
                            text=f"message number {i} about tea", occurred_at=at, metadata={"i": i})
        if not mem.has_entity("person:ana"):
            mem.register_entity("person:ana", "Ana", "person", f"m{i}", BY, aliases=["A."])
            mem.register_entity("person:bo", "Bo", "person", f"m{i}", BY)
            mem.register_entity("person:bob", "Bob", "person", f"m{i}", BY)
        mem.add_fact(fact(f"f{i}", "person:ana", f"Ana fact {i}", at, ["person:bo"], f"m{i}"))
        if i % 3 == 1 and mem.is_active(f"f{i - 1}"):
            mem.confirm_fact(f"f{i - 1}", f"m{i}", at)
            mem.observe_relationship("person:ana", "person:bo", "knows", f"m{i}", at)
        if i % 3 == 2 and mem.is_active(f"f{i - 1}"):
            mem.update_fact(f"f{i - 1}", fact(f"u{i}", "person:ana", f"Ana update {i}", at))
            mem.observe_relationship("person:bob", "person:ana", "knows", f"m{i}", at)
        if i % 5 == 4:
            mem.retract_fact(f"f{i}", f"m{i}", at, "wrong", BY)
            mem.reject(f"m{i}", {"text": "?"}, "bad")
        if i == start + 3 and mem.has_entity("person:bob"):
            mem.add_alias("person:bob", "Bobby", f"m{i}")
            mem.merge_entities("person:bob", "person:bo", f"m{i}", "same")
        if i == start + 5 and agent.endswith("-b"):  # forget the agent (ADR-0016)
            mem.forget(at, "user request", BY)
        if i % 3 == 2 and mem.is_active(f"u{i}"):  # the user corrected it (ADR-0019)
            mem.note_correction(f"u{i}", f"f{i - 1}", f"m{i}", "actually")
        if i % 4 == 3:  # an LLM outage deferred it twice before it was extracted (ADR-0014)
            rec.defer_extraction("LLM call failed: connection refused", 3)
            rec.defer_extraction("LLM call timed out after 30s", 1)
        if i % 6 == 5:  # ... and one that is still pending
            rec.defer_extraction("still down", 2)
        else:
            rec.complete({"extractor": "test"}, {}, None, None, 0, {})
        if i % 7 == 6 and mem.is_active(f"f{i}"):  # reprocessed (ADR-0023): ended, re-added
            mem.retract_fact(f"f{i}", f"m{i}", at, REPROCESSED, {"via": "reprocess"})
            mem.add_fact(fact(f"r{i}", "person:ana", f"Ana fact {i}", at, ["person:bo"], f"m{i}"))
            rec.reprocessed({"extractor": "test", "via": "reprocess"}, {}, None, None, 0,
                            {"ADD": 1}, [f"f{i}"])
        pos = app.save(mem, rec)[-1].notification.id
        if i % 4 == 3:  # sleep-time jobs: retrieval feedback and importance (ADR-0019)
            pos = _job_events(app, agent, i, at)
    return pos


def _job_events(app: EventLog, agent: str, i: int, at: datetime) -> int:
    try:
        jobs: Any = app.repository.get(AgentJobs.create_id(agent))
    except Exception:  # noqa: BLE001 - not yet created
        jobs = AgentJobs(agent_id=agent)
    ids = [f"f{i}", f"f{i - 1}", "no-such-fact"]
    jobs.observe_retrievals({k: 2 for k in ids}, {k: at.isoformat() for k in ids}, 2,
                            jobs.feedback_sequence + 2)
    jobs.assess_importance("test", {f"f{i}": 0.5 + i / 100, f"f{i - 2}": 0.777},
                           {"person:ana": 0.6 + i / 1000, "person:bo": 0.55}, at)
    jobs.observe_pattern(f"p{i % 2}", "repeated", f"pattern {i}", [f"f{i}"], [f"m{i}"], 0.7,
                         "deterministic:repeated")
    if i % 8 == 7:
        jobs.retire_pattern("p1", "gone")
    # ADR-0022: vitality, communities (one dissolved as membership changes), profiles
    jobs.assess_vitality("test", {f"f{i}": 0.2, f"f{i - 1}": 0.5 + i / 100, "no-such-fact": 0.1},
                         {f"f{i}", "no-such-fact"}, at)
    members = ["person:ana", "person:bo"] + ([f"person:x{i}"] if i % 8 == 7 else [])
    for standing in sorted(jobs.state_of("communities")):
        jobs.dissolve_community(standing, "changed")
    jobs.detect_community("c-" + "-".join(members), members, "Ana and Bo", "test")
    jobs.refresh_profile("person:ana", f"Ana, profile {i}", "template-v1", [f"f{i}"], at)
    jobs.refresh_profile("person:nobody", "no such entity", "template-v1", [], at)
    return app.save(jobs)[-1].notification.id


@pytest.fixture
def store(pg_url: str, fresh_schema: Any) -> Iterator[tuple[str, dict[str, str], EventLog]]:
    schema, env = fresh_schema("rb")
    app = EventLog(env)
    yield schema, env, app
    app.close()


def test_rebuild_equals_incremental_and_never_re_embeds(pg_url: str, store: Any) -> None:
    schema, env, app = store
    embedder = CountingEmbedder(HashEmbedder())
    with ProjectionSet.start(EventLog, env, embedder) as ps:
        pos = drive(app, "agent-a", 12)
        pos = drive(app, "agent-b", 7)
        ps.wait(pos, timeout=30)
    incremental = dump(pg_url, schema)
    assert len(incremental["mem_facts"]) > 10 and len(incremental["mem_relationships"]) >= 2
    assert any(r for r in incremental["mem_entities"] if r[5] == "person:bo")  # merged
    assert incremental["mem_hidden_messages"] and incremental["mem_forgotten"]
    assert any(r for r in incremental["mem_facts"] if "forgotten" in r)
    # job events and corrections reached the tables (importance, usage, correction flags)
    usage = _columns(pg_url, schema, "mem_fact_usage", "importance, times_retrieved")
    assert {0.777, 0.53} <= {r[0] for r in usage} and any(r[1] == 2 for r in usage)
    assert any(r[0] for r in _columns(pg_url, schema, "mem_facts", "is_correction"))
    # facts carry their turns' scopes (some recorded after the fact: fixed up) and confirmations'
    scoped = _columns(pg_url, schema, "mem_facts", "source_message_ids, source_scope")
    # ("m", the updates' source, is no turn: skipped)
    assert all(s == [{"s": "s", "m": {"i": int(m[1:])}} for m in ids if m != "m"]
               for ids, s in scoped)
    assert any(len(s) == 2 and s[1]["m"] == {"i": int(ids[1][1:])} for ids, s in scoped)
    assert incremental["mem_turn_scopes"]
    assert 0.55 in {r[0] for r in _columns(pg_url, schema, "mem_entities", "importance")}
    assert incremental["mem_patterns"]
    # reprocessed facts ended without hiding their turn; the records show it
    reproc = [r for r in incremental["mem_facts"] if r[1] == "f6"]
    assert reproc and "retracted" in reproc[0]
    assert not [r for r in incremental["mem_hidden_messages"] if r[1] == "m6"]
    # pending: m5, m11 (deferred 3 times) of agent-a, m5 of agent-b; m3, m7 were extracted later
    assert [(r[0], r[1], r[6]) for r in incremental["mem_extraction_pending"]] == [
        ("agent-a", "m11", 3), ("agent-a", "m5", 1), ("agent-b", "m5", 1)]

    cold = embedder.texts
    counting = CountingEmbedder(HashEmbedder())
    report = rebuild(EventLog, env, counting)
    assert report.embed_calls == 0 and counting.calls == 0 and cold > 0
    assert report.position == pos and report.events >= pos - 1
    rebuilt = dump(pg_url, schema)
    for table, rows in incremental.items():
        assert rebuilt[table] == rows, table

    # one group of agents at a time, in small pages (ADR-0032): groups of at most one event
    # put every agent key byte in a group of its own (the two agents in different ones; a
    # hash modulo 3 groups as well); the same tables row for row
    a, b = agent_aggregate_id("agent-a"), agent_aggregate_id("agent-b")
    assert a.bytes[15] != b.bytes[15]
    stream = LogStream(app, _conninfo(env), pos)
    assert stream.plan(1) == [frozenset({a.bytes[15]}), frozenset({b.bytes[15]})] or \
        stream.plan(1) == [frozenset({b.bytes[15]}), frozenset({a.bytes[15]})]
    assert stream.plan(pos) == [None]
    rebuild(EventLog, env, counting, group_events=1, page_size=7)
    assert dump(pg_url, schema) == rebuilt

    # the projector resumes right after the rebuilt position: no duplicates, same as rebuild
    with ProjectionSet.start(EventLog, env, counting) as ps:
        pos = drive(app, "agent-a", 4, start=12)
        ps.wait(pos, timeout=30)
    resumed = dump(pg_url, schema)
    rebuild(EventLog, env, counting, "memory")
    rebuild(EventLog, env, counting, "conversation", progress=True)
    assert dump(pg_url, schema) == resumed


def test_rebuild_with_another_model_changes_dimensions(pg_url: str, store: Any) -> None:
    schema, env, app = store
    with ProjectionSet.start(EventLog, env, HashEmbedder()) as ps:
        ps.wait(drive(app, "agent-c", 4), timeout=30)
    small = CountingEmbedder(HashEmbedder(dimensions=32))
    report = rebuild(EventLog, env, small)
    assert report.texts_embedded == 4 + 4 + 1  # 4 messages, 4 facts, 1 update text (distinct)
    with psycopg.connect(pg_url) as conn:
        conn.execute(f'SET search_path TO "{schema}", public')
        dims = conn.execute("SELECT DISTINCT vector_dims(embedding) FROM mem_facts").fetchall()
        meta = conn.execute("SELECT projection, embedding_model FROM mem_read_model_meta "
                            "ORDER BY 1").fetchall()
    assert dims == [(32,)]
    assert meta == [("conversation", "hash-bow-32"), ("memory", "hash-bow-32")]
    back = CountingEmbedder(HashEmbedder())
    assert rebuild(EventLog, env, back).embed_calls == 0  # old vectors kept in cache


def test_rebuild_of_an_empty_log(store: Any) -> None:
    _, env, _ = store
    report = rebuild(EventLog, env, HashEmbedder())
    assert report.events == 0 and report.position is None
    with ProjectionSet.start(EventLog, env, HashEmbedder()) as ps:
        assert ps.positions() == {"conversation": None, "memory": None}
