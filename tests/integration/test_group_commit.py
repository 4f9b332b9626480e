"""Group commit and batch recording of the write pipeline, against REAL PostgreSQL and NATS.

What is checked here (ADR-0004): concurrent saves share transactions without mixing up
their callers' results; a conflict or a storage error inside a shared transaction only
hits the guilty member; ``record_many`` records each message once; a NATS burst keeps
per-agent order and is processed exactly once.

How transactions are *observed*: rows inserted by one PostgreSQL transaction share their
``xmin`` system column, so the number of distinct ``xmin`` values over a test's rows (each
test that counts uses its own schema) is the number of transactions that wrote them.
How a shared transaction is *forced*: the test holds ``LOCK TABLE … IN EXCLUSIVE MODE`` on
the events table (the lock every insert takes), so the first saver blocks inside its
transaction while the other callers queue behind it in the ``GroupCommit``; releasing the
lock lets the next leader write all the queued saves at once. A storage error is a real
PostgreSQL error too: a ``BEFORE INSERT`` trigger that refuses one aggregate's rows.

The only fake is the LLM: ``ScriptedLLM`` (TEST DOUBLE, answers from a table keyed by the
message text; a ``Gate`` holds the scripted answers until the test lets them go).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest
from eventsourcing.persistence import DataError
from psycopg import sql
from test_ingest import Collector, start_ingest, wait_until
from test_write_pipeline import (
    WHEN,
    active_fact_texts,
    extraction_json,
    fact,
    message_key,
    msg,
    scripted_extractor,
    topics,
)

from engramdb.domain.aggregate import MessageRecord
from engramdb.domain.keys import agent_aggregate_id, message_record_id, new_fact_id
from engramdb.infra.providers.scripted import ScriptedLLM
from engramdb.services.entrypoints.nats.publisher import MessagePublisher
from engramdb.services.extraction import LLMExtractor
from engramdb.services.memory.event_log import EventLog
from engramdb.services.write.messages import ConversationMessage
from engramdb.services.write.pipeline import WritePipeline, WriteResult

# ----- helpers ---------------------------------------------------------------------------------


def short_name(event: Any) -> str:
    return type(event).__qualname__.split(".")[-1]


def events_table(app: EventLog) -> sql.Composable:
    recorder: Any = app.recorder
    return sql.Identifier(recorder.datastore.schema, recorder.events_table_name)


def transactions_of(pg_url: str, app: EventLog, originators: Sequence[UUID] | None = None,
                    topic_suffix: str = "") -> int:
    """Distinct ``xmin`` (= inserting transactions) over the events of ``originators``."""
    query = sql.SQL("SELECT count(DISTINCT xmin::text) FROM {} WHERE topic LIKE %s").format(events_table(app))
    params: list[Any] = [f"%{topic_suffix}"]
    if originators is not None:
        query += sql.SQL(" AND originator_id = ANY(%s)")
        params.append(list(originators))
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(query, params).fetchone()
    assert row is not None
    return int(row[0])


@contextmanager
def events_table_locked(pg_url: str, app: EventLog) -> Iterator[None]:
    """Hold the lock every event insert takes, until the block ends (then roll back)."""
    with psycopg.connect(pg_url) as conn:
        conn.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(events_table(app)))
        yield
        conn.rollback()


def wait_queued(pipeline: WritePipeline, count: int, timeout: float = 10.0) -> None:
    """White-box: wait until ``count`` saves wait behind the (blocked) leader."""
    wait_until(lambda: len(pipeline.commits._queue) >= count, timeout, f"{count} queued saves")


class Gate:
    """Scripted extraction answers held at a barrier until ``release()``.

    All gated extractions are in flight together (so their records are saved), then the
    test arranges the database (lock, concurrent writer) and lets them reach their
    decision saves at once. Answers still come from the test's table only.
    """

    def __init__(self, parties: int, table: Mapping[str, str], late: Sequence[str] = ()) -> None:
        self.table = dict(table)
        self.arrived = threading.Barrier(parties + 1)  # + the test thread
        self.go = threading.Event()
        self.late_keys = set(late)  # these answer only after ``release_late()``
        self.late = threading.Event()

    def answer(self, messages: Sequence[dict[str, Any]]) -> str:
        key = message_key(messages)
        self.arrived.wait(timeout=15)
        self.go.wait(timeout=15)
        if key in self.late_keys:
            self.late.wait(timeout=15)
        return self.table[key]

    def extractor(self) -> tuple[LLMExtractor, ScriptedLLM]:
        llm = ScriptedLLM(self.answer, name="scripted-gated", key_fn=message_key)
        return LLMExtractor(llm, timeout_sec=30), llm

    def all_arrived(self) -> None:
        self.arrived.wait(timeout=15)

    def release(self) -> None:
        self.go.set()

    def release_late(self) -> None:
        self.late.set()


def run_threads(targets: Sequence[Callable[[], Any]]) -> tuple[list[threading.Thread], dict[int, Any], list[BaseException]]:
    """Start one thread per target; returns (threads, results by index, errors)."""
    results: dict[int, Any] = {}
    errors: list[BaseException] = []

    def runner(index: int, target: Callable[[], Any]) -> None:
        try:
            results[index] = target()
        except BaseException as exc:  # noqa: BLE001 — reported to the test
            errors.append(exc)
            results[index] = exc

    threads = [threading.Thread(target=runner, args=(i, t), daemon=True) for i, t in enumerate(targets)]
    for t in threads:
        t.start()
    return threads, results, errors


def join_all(threads: Sequence[threading.Thread], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a writer thread hung"


def last_event_originator(app: EventLog, position: int) -> UUID:
    (notification,) = app.recorder.select_notifications(start=position, limit=1)
    assert notification.id == position
    return UUID(str(notification.originator_id))


def record_topics(app: EventLog, agent: str, message_id: str) -> list[str]:
    return [short_name(e) for e in app.events.get(message_record_id(agent, message_id))]


@pytest.fixture
def schema_app(fresh_schema: Any) -> Iterator[EventLog]:
    """An application on its own schema (its events table holds only this test's rows)."""
    _schema, env = fresh_schema("gc")
    application = EventLog(env)
    yield application
    application.close()


def ana_says(agent: str, mid: str) -> tuple[str, str]:
    """(message text, the one fact the scripted extractor finds in it)."""
    return f"note {mid} of {agent}", f"Ana noted {mid} for {agent}"


# ----- (1) many writers, one pipeline ----------------------------------------------------------


def test_concurrent_writers_share_transactions_and_get_their_own_results(
    schema_app: EventLog, pg_url: str
) -> None:
    app = schema_app
    agents = [f"agent-{i}-{uuid.uuid4().hex[:6]}" for i in range(10)]
    per_agent = 3
    plan = {a: [f"{a}-m{k}" for k in range(per_agent)] for a in agents}
    table = {ana_says(a, mid)[0]: extraction_json(fact(ana_says(a, mid)[1])) for a in agents for mid in plan[a]}
    gate = Gate(len(agents), {ana_says(a, plan[a][0])[0]: table[ana_says(a, plan[a][0])[0]] for a in agents})
    gated_llm: ScriptedLLM | None = None

    class Router:
        """First message of each agent goes through the gate, the rest straight through."""

        def __init__(self) -> None:
            self.gated, llm = gate.extractor()
            nonlocal gated_llm
            gated_llm = llm
            self.free, self.free_llm = scripted_extractor(table, timeout_sec=20)
            self.info = self.free.info

        def extract(self, request: Any) -> Any:
            first = request.message_id.endswith("-m0")
            return (self.gated if first else self.free).extract(request)

    router = Router()
    pipeline = WritePipeline(app, router)

    def writer(agent: str) -> list[WriteResult]:
        return [pipeline.write(msg(agent, ana_says(agent, mid)[0], mid)) for mid in plan[agent]]

    threads, results, errors = run_threads([lambda a=a: writer(a) for a in agents])  # type: ignore[misc]
    gate.all_arrived()  # every first message is recorded and waits in extraction
    with events_table_locked(pg_url, app):
        gate.release()
        wait_queued(pipeline, len(agents) - 1)  # one leader blocked on the lock, the rest queued
    join_all(threads)
    assert errors == []

    total = len(agents) * per_agent
    assert gated_llm is not None and len(gated_llm.calls) == len(agents)
    assert len(router.free_llm.calls) == total - len(agents)
    for index, agent in enumerate(agents):
        agent_results: list[WriteResult] = results[index]
        assert [r.message_id for r in agent_results] == plan[agent]
        for r, mid in zip(agent_results, plan[agent], strict=True):
            assert r.agent_id == agent and not r.duplicate and not r.resumed and r.extraction_error is None
            adds = [(d.fact_id, d.text) for d in r.decisions if d.kind == "ADD"]
            assert adds == [(new_fact_id(agent, mid, 0), ana_says(agent, mid)[1])], "decisions of another message"
            # the position is this caller's own last event: its record's Processed
            assert last_event_originator(app, r.position) == message_record_id(agent, mid)
            assert record_topics(app, agent, mid) == ["Recorded", "Processed"]
        assert active_fact_texts(app, agent) == sorted(ana_says(agent, mid)[1] for mid in plan[agent])
        positions = [r.position for r in agent_results]
        assert positions == sorted(positions)

    # The gated decision saves went in at most two transactions (the blocked leader's own, then
    # everything queued behind it); overall, fewer transactions than messages.
    gated_records = [message_record_id(a, plan[a][0]) for a in agents]
    assert transactions_of(pg_url, app, gated_records, "Processed") <= 2
    all_transactions = transactions_of(pg_url, app)
    stats = pipeline.commits.stats
    print("group commit stats:", stats, "transactions in the log:", all_transactions)
    assert all_transactions < total
    assert stats["saves"] == 2 * total and stats["transactions"] < stats["saves"]


# ----- (2) conflicts inside a shared transaction ------------------------------------------------


def test_conflicting_member_of_a_shared_transaction_redecides_or_is_a_duplicate(
    schema_app: EventLog, pg_url: str
) -> None:
    """Worker A (its own app + cache) has a group of saves queued; worker B, another
    'process', meanwhile writes the same agents: once the very same message, once another
    one. A's group transaction conflicts; only the guilty members are affected."""
    app_a = schema_app
    app_b = EventLog(dict(app_a.env))
    try:
        shared_dup, shared_new = f"dup-{uuid.uuid4().hex[:6]}", f"new-{uuid.uuid4().hex[:6]}"
        privates = [f"priv-{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
        dup_text, a_text, b_text = "We met Rui today.", "I like tea and coffee.", "I like tea."
        private_table = {ana_says(p, "p1")[0]: extraction_json(fact(ana_says(p, "p1")[1])) for p in privates}
        gate = Gate(2 + len(privates), {
            dup_text: extraction_json(fact("Ana met Rui")),
            a_text: extraction_json(fact("Ana likes tea"), fact("Ana likes coffee")),
            **private_table,
        })
        extractor_a, llm_a = gate.extractor()
        pipeline_a = WritePipeline(app_a, extractor_a)
        extractor_b, llm_b = scripted_extractor({
            dup_text: extraction_json(fact("Ana met Rui")),
            b_text: extraction_json(fact("Ana likes tea")),
            "warm up": extraction_json(),
        })
        pipeline_b = WritePipeline(app_b, extractor_b)
        pipeline_b.write(msg(shared_new, "warm up", "w0"))
        app_a.agent_memory(shared_new)  # A caches the agent: soon stale

        jobs: list[Callable[[], WriteResult]] = [
            lambda: pipeline_a.write(msg(shared_dup, dup_text, "m-dup")),
            lambda: pipeline_a.write(msg(shared_new, a_text, "a1")),
            *[lambda p=p: pipeline_a.write(msg(p, ana_says(p, "p1")[0], "p1")) for p in privates],  # type: ignore[misc]
        ]
        threads, results, errors = run_threads(jobs)
        gate.all_arrived()  # A recorded all its messages and is "thinking"
        # B, meanwhile: picks up A's recorded-but-unprocessed m-dup (resumes it) and writes
        # another message for shared_new
        b_dup = pipeline_b.write(msg(shared_dup, dup_text, "m-dup"))
        b_new = pipeline_b.write(msg(shared_new, b_text, "b1"))
        with events_table_locked(pg_url, app_a):
            gate.release()
            wait_queued(pipeline_a, len(jobs) - 1)
        join_all(threads)
        assert errors == []
        a_dup, a_new, *a_privates = (results[i] for i in range(len(jobs)))

        # the same message: processed once (by B, which resumed A's record), a duplicate for A
        assert b_dup.resumed and not b_dup.duplicate
        assert [d.text for d in b_dup.decisions if d.kind == "ADD"] == ["Ana met Rui"]
        assert a_dup.duplicate and a_dup.decisions == []
        assert active_fact_texts(app_a, shared_dup) == ["Ana met Rui"]
        assert record_topics(app_a, shared_dup, "m-dup") == ["Recorded", "Processed"]

        # another message meanwhile: A re-decided on fresh state (no second LLM call), B's
        # fact is confirmed (NOOP), not added twice, and A's new fact is not lost
        assert not b_new.duplicate and a_new.conflicts >= 1 and not a_new.duplicate
        assert sorted(d.kind for d in a_new.decisions if d.kind in ("ADD", "NOOP")) == ["ADD", "NOOP"]
        assert active_fact_texts(app_a, shared_new) == ["Ana likes coffee", "Ana likes tea"]
        adds = [e.text for e in app_a.agent_events(shared_new) if short_name(e) == "FactAdded"]
        assert Counter(adds) == Counter({"Ana likes tea": 1, "Ana likes coffee": 1})
        assert topics(app_a, shared_new).count("FactConfirmed") == 1
        assert Counter(c.key for c in llm_a.calls) == Counter({dup_text: 1, a_text: 1, **{k: 1 for k in private_table}})
        assert len(llm_b.calls) == 3

        # the innocent members of the conflicting transaction were saved, unchanged
        for p, r in zip(privates, a_privates, strict=True):
            assert not r.duplicate and r.conflicts == 0
            assert [d.text for d in r.decisions if d.kind == "ADD"] == [ana_says(p, "p1")[1]]
            assert last_event_originator(app_a, r.position) == message_record_id(p, "p1")
            assert active_fact_texts(app_a, p) == [ana_says(p, "p1")[1]]
        assert pipeline_a.commits.stats["split"] >= 1
    finally:
        app_b.close()


def test_two_workers_with_many_threads_each_process_every_message_once(es_env: dict[str, str]) -> None:
    """Unscripted interleaving: two apps, each with group commit and 4 writer threads; one
    thread per worker writes the shared agent's 10 messages (opposite orders), the others
    write private agents, so shared-agent conflicts land in shared transactions."""
    shared = f"shared-{uuid.uuid4().hex[:8]}"
    shared_texts = {f"s{i}": f"Shared statement {i} about Ana." for i in range(10)}
    table = {t: extraction_json(fact(f"Ana fact {mid}"), fact("Ana is a person")) for mid, t in shared_texts.items()}
    privates = {w: [f"priv-{w}-{j}-{uuid.uuid4().hex[:6]}" for j in range(3)] for w in range(2)}
    for w in range(2):
        for p in privates[w]:
            for k in range(4):
                text, fact_text = ana_says(p, f"p{k}")
                table[text] = extraction_json(fact(fact_text))
    apps = [EventLog(es_env), EventLog(es_env)]
    pipelines = [WritePipeline(a, scripted_extractor(table, timeout_sec=20)[0]) for a in apps]
    try:
        jobs: list[Callable[[], list[WriteResult]]] = []
        for w in range(2):
            order = list(shared_texts) if w == 0 else list(reversed(shared_texts))
            jobs.append(lambda w=w, order=order: [  # type: ignore[misc]
                pipelines[w].write(msg(shared, shared_texts[mid], mid)) for mid in order])
            for p in privates[w]:
                jobs.append(lambda w=w, p=p: [  # type: ignore[misc]
                    pipelines[w].write(msg(p, ana_says(p, f"p{k}")[0], f"p{k}")) for k in range(4)])
        threads, results, errors = run_threads(jobs)
        join_all(threads, timeout=25)
        assert errors == []
        shared_results = [r for i, rs in results.items() for r in rs if r.agent_id == shared]
        assert len(shared_results) == 20
        processed = Counter(r.message_id for r in shared_results if not r.duplicate)
        assert processed == Counter({mid: 1 for mid in shared_texts}), "each message processed exactly once"
        assert all(r.decisions == [] for r in shared_results if r.duplicate)
        adds = [e.text for e in apps[0].agent_events(shared) if short_name(e) == "FactAdded"]
        assert sorted(adds) == sorted(["Ana is a person", *[f"Ana fact {mid}" for mid in shared_texts]])
        assert topics(apps[0], shared).count("FactConfirmed") == 9  # the repeated fact: NOOPs, none lost
        for mid in shared_texts:
            assert record_topics(apps[1], shared, mid) == ["Recorded", "Processed"]
        for w in range(2):
            for p in privates[w]:
                assert active_fact_texts(apps[w], p) == sorted(ana_says(p, f"p{k}")[1] for k in range(4))
        print("conflicts:", sum(r.conflicts for r in shared_results),
              "stats:", [p.commits.stats for p in pipelines])
    finally:
        for a in apps:
            a.close()


# ----- (3) record_many ----------------------------------------------------------------------


def test_record_many_records_each_message_once_and_write_takes_over(
    schema_app: EventLog, pg_url: str, agent_id: str
) -> None:
    app = schema_app
    ids = ["m1", "m2", "done", "half", "m3"]
    texts = {mid: ana_says(agent_id, mid) for mid in ids}
    extractor, llm = scripted_extractor({t: extraction_json(fact(f)) for t, f in texts.values()})
    pipeline = WritePipeline(app, extractor)
    done = pipeline.write(msg(agent_id, texts["done"][0], "done"))  # recorded and processed
    app.save(MessageRecord(agent_id=agent_id, message_id="half", session_id=None, speaker="Ana",  # a crash
                           text=texts["half"][0], occurred_at=WHEN, metadata={}))          # after stage 1
    assert not done.duplicate and len(llm.calls) == 1

    batch = [msg(agent_id, texts[mid][0], mid) for mid in ["m1", "m2", "m1", "done", "half", "m3"]]
    out = pipeline.record_many(batch)
    assert [r.message_id if r is not None else None for r in out] == ["m1", "m2", None, None, None, "m3"]
    assert all(isinstance(r, MessageRecord) and not r.processed for r in out if r is not None)
    for mid in ids:
        assert record_topics(app, agent_id, mid).count("Recorded") == 1
    done_record = app.message_record(agent_id, "done")
    assert done_record is not None and done_record.processed  # untouched by the batch

    # the recorded messages are processed from their records: no second Recorded, no resume
    r1 = pipeline.write(batch[0], recorded=out[0])
    assert not r1.duplicate and not r1.resumed
    assert [d.text for d in r1.decisions if d.kind == "ADD"] == [texts["m1"][1]]
    assert record_topics(app, agent_id, "m1") == ["Recorded", "Processed"]
    # the duplicate inside the batch and the already processed one are duplicates
    assert pipeline.write(batch[2]).duplicate
    assert pipeline.write(batch[3]).duplicate
    # the one recorded before (crashed) is resumed
    half = pipeline.write(batch[4])
    assert half.resumed and [d.text for d in half.decisions if d.kind == "ADD"] == [texts["half"][1]]
    # a record of ANOTHER message is not taken for this one: m2 takes the usual path
    r2 = pipeline.write(batch[1], recorded=out[5])
    assert r2.resumed and [d.text for d in r2.decisions if d.kind == "ADD"] == [texts["m2"][1]]
    r3 = pipeline.write(batch[5], recorded=out[5])
    assert not r3.resumed and [d.text for d in r3.decisions if d.kind == "ADD"] == [texts["m3"][1]]
    # a record already processed is not processed twice
    assert pipeline.write(batch[5], recorded=out[5]).duplicate

    for mid in ids:
        assert record_topics(app, agent_id, mid) == ["Recorded", "Processed"]
    assert Counter(c.key for c in llm.calls) == Counter({texts[mid][0]: 1 for mid in ids})
    assert active_fact_texts(app, agent_id) == sorted(f for _, f in texts.values())

    # a batch without conflicts is ONE transaction
    fresh = [msg(agent_id, f"batch text {i}", f"b{i}") for i in range(6)]
    assert all(r is not None for r in pipeline.record_many(fresh))
    assert transactions_of(pg_url, app, [message_record_id(agent_id, f"b{i}") for i in range(6)]) == 1
    assert pipeline.record_many([]) == []


# ----- (4) storage error inside a shared transaction ------------------------------------------


@contextmanager
def refuse_inserts_of(pg_url: str, app: EventLog, originator: UUID) -> Iterator[None]:
    """A real PostgreSQL error for one aggregate only (SQLSTATE 22023, not a conflict)."""
    recorder: Any = app.recorder
    func = sql.Identifier(recorder.datastore.schema, "refuse_test_inserts")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL(
            "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.originator_id::text = {} THEN "
            "RAISE EXCEPTION 'refused by the test trigger' USING ERRCODE = '22023'; END IF; "
            "RETURN NEW; END $$"
        ).format(func, sql.Literal(str(originator))))
        conn.execute(sql.SQL(
            "CREATE TRIGGER refuse_test_inserts BEFORE INSERT ON {} FOR EACH ROW EXECUTE FUNCTION {}()"
        ).format(events_table(app), func))
        try:
            yield
        finally:
            conn.execute(sql.SQL("DROP TRIGGER refuse_test_inserts ON {}").format(events_table(app)))
            conn.execute(sql.SQL("DROP FUNCTION {}()").format(func))


def test_storage_error_in_a_shared_transaction_fails_only_its_caller(
    schema_app: EventLog, pg_url: str
) -> None:
    app = schema_app
    agents = [f"agent-{i}-{uuid.uuid4().hex[:6]}" for i in range(6)]
    doomed = agents[2]
    table = {ana_says(a, "m1")[0]: extraction_json(fact(ana_says(a, "m1")[1])) for a in agents}
    # the doomed message answers last, so it joins a group behind a leader, never leads
    gate = Gate(len(agents), table, late=[ana_says(doomed, "m1")[0]])
    extractor, _ = gate.extractor()
    pipeline = WritePipeline(app, extractor)
    with refuse_inserts_of(pg_url, app, agent_aggregate_id(doomed)):
        threads, results, errors = run_threads(
            [lambda a=a: pipeline.write(msg(a, ana_says(a, "m1")[0], "m1")) for a in agents]  # type: ignore[misc]
        )
        gate.all_arrived()
        with events_table_locked(pg_url, app):
            gate.release()
            wait_queued(pipeline, len(agents) - 2)
            gate.release_late()
            wait_queued(pipeline, len(agents) - 1)
        join_all(threads)
    # the failing caller gets the storage error ...
    failure = results[agents.index(doomed)]
    assert isinstance(failure, DataError) and "refused by the test trigger" in str(failure)
    assert errors == [failure]
    # ... and every other member of the group is saved
    for index, agent in enumerate(agents):
        if agent == doomed:
            continue
        r = results[index]
        assert isinstance(r, WriteResult) and not r.duplicate
        assert last_event_originator(app, r.position) == message_record_id(agent, "m1")
        assert active_fact_texts(app, agent) == [ana_says(agent, "m1")[1]]
    # the failed message stays recorded (not processed) and is resumed once storage works
    assert record_topics(app, doomed, "m1") == ["Recorded"]
    assert app.agent_events(doomed) == []
    retry_extractor, _ = scripted_extractor(table)
    again = WritePipeline(app, retry_extractor).write(msg(doomed, ana_says(doomed, "m1")[0], "m1"))
    assert again.resumed and active_fact_texts(app, doomed) == [ana_says(doomed, "m1")[1]]


# ----- (5) a burst through NATS ----------------------------------------------------------------


def test_nats_burst_keeps_per_agent_order_and_is_processed_once(
    schema_app: EventLog, pg_url: str, nats_url: str
) -> None:
    app = schema_app
    prefix = f"t{uuid.uuid4().hex[:10]}"
    agents = [f"burst-{i}-{uuid.uuid4().hex[:6]}" for i in range(5)]
    messages = [
        ConversationMessage(
            agent_id=agents[k % 5], message_id=f"m{k:02d}", speaker="Ana",
            text=ana_says(agents[k % 5], f"m{k:02d}")[0], occurred_at=WHEN + timedelta(seconds=k),
        )
        for k in range(60)
    ]
    extractor, llm = scripted_extractor(
        {m.text: extraction_json(fact(ana_says(m.agent_id, m.message_id)[1])) for m in messages}, timeout_sec=20
    )
    pipeline = WritePipeline(app, extractor)

    async def publish_burst() -> None:
        async with MessagePublisher(nats_url, prefix) as pub:
            acks = await pub.publish_many(messages)
        assert not any(a.duplicate for a in acks)

    asyncio.run(publish_burst())  # all 60 wait in the stream: the consumer fetches full batches
    collector = Collector()
    runner = start_ingest(nats_url, pipeline, prefix, collector, batch_size=32, max_concurrency=8)
    try:
        wait_until(lambda: len(collector.results) >= len(messages), timeout=20, what="the burst")
        time.sleep(0.2)  # a redelivery would show up as an extra result
    finally:
        runner.stop()

    assert len(collector.results) == len(messages)
    assert not any(r.duplicate or r.extraction_error for r in collector.results)
    assert Counter(c.key for c in llm.calls) == Counter({m.text: 1 for m in messages})
    for agent in agents:
        published = [m for m in messages if m.agent_id == agent]
        assert [r.message_id for r in collector.results if r.agent_id == agent] == [m.message_id for m in published]
        added = [e for e in app.agent_events(agent) if short_name(e) == "FactAdded"]
        assert [e.source_message_id for e in added] == [m.message_id for m in published]
        assert [e.valid_from for e in added] == [m.occurred_at for m in published]
        for m in published:
            assert record_topics(app, agent, m.message_id) == ["Recorded", "Processed"]
    # the fetched batches were recorded together: far fewer transactions than messages
    recorded_in = transactions_of(pg_url, app, topic_suffix="Recorded")
    print("transactions holding Recorded events:", recorded_in, "stats:", pipeline.commits.stats)
    assert recorded_in < len(messages) // 2
