"""Sleep-time jobs (issue 12, ADR-0019): retrieval feedback over real NATS JetStream, importance
scoring into the read model and the formula ranking, corrections from the write pipeline,
failure/timeout isolation, idempotency and the advisory lock (two runners at once).

Real PostgreSQL and NATS from the fixtures; embedder: ``HashEmbedder`` (deterministic double);
extractor: the offline rule-based one (no LLM).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from engramdb.domain.corrections import correction_cue
from engramdb.domain.jobs import AgentJobs, agent_jobs_id
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.jobs import JOBS, Job, JobContext, JobTimeout
from engramdb.services.jobs.runner import run_pass
from engramdb.services.memory.facade import Memory


@pytest.fixture
def memory(fresh_schema: Any) -> Iterator[Memory]:
    _, env = fresh_schema("jobs")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield mem


def _facts(memory: Memory, agent: str) -> dict[str, dict[str, Any]]:
    with memory.pool.connection() as conn:
        conn.row_factory = psycopg.rows.dict_row
        rows = conn.execute(
            "SELECT f.fact_id, f.fact_text, coalesce(u.importance, f.importance) AS importance, "
            "coalesce(u.times_retrieved, 0) AS times_retrieved, u.last_retrieved_at, "
            "f.is_correction, f.status FROM mem_facts f LEFT JOIN mem_fact_usage u "
            "USING (agent_id, fact_id) WHERE agent_id = %s", (agent,)).fetchall()
        conn.row_factory = psycopg.rows.tuple_row
    return {r["fact_id"]: r for r in rows}


def _job_events(memory: Memory, agent: str) -> list[Any]:
    return list(memory.app.events.get(agent_jobs_id(agent)))


def test_correction_cues() -> None:
    assert correction_cue("Actually, I live in Lisbon") == "actually"
    assert correction_cue("não, na verdade eu moro em Lisboa") is not None
    assert correction_cue("I moved to Lisbon last week") is None


def test_a_correction_is_recorded_and_folded(memory: Memory) -> None:
    agent = f"c-{uuid.uuid4().hex[:6]}"
    memory.write(agent, "I live in Porto", speaker="Ana")
    done = memory.write(agent, "Actually, I live in Lisbon", speaker="Ana")
    memory.wait_for_projections(done.position)
    facts = _facts(memory, agent)
    corrected = [f for f in facts.values() if f["is_correction"]]
    assert [f["fact_text"] for f in corrected] == ["Ana lives in Lisbon"] or (
        len(corrected) == 1 and "Lisbon" in corrected[0]["fact_text"])
    kinds = [type(e).__name__ for e in memory.app.agent_events(agent)]
    assert "CorrectionNoted" in kinds


def test_feedback_and_importance_end_to_end(memory: Memory, nats_url: str) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    agent = f"i-{uuid.uuid4().hex[:6]}"
    memory.enable_feedback(nats_url, prefix)
    for text in ("I live in Porto", "My sister is called Rita", "I work at Vertix"):
        done = memory.write(agent, text, speaker="Ana")
    memory.wait_for_projections(done.position)
    started = time.perf_counter()
    for _ in range(3):
        result = memory.retrieve(agent, "Where does Ana work?")
    assert time.perf_counter() - started < 10
    used = result.facts[0].fact_id
    memory.feedback.flush()
    assert memory.feedback.sent == 3 and memory.feedback.dropped == 0

    ctx = JobContext(memory, nats_url=nats_url, prefix=prefix)
    runs = run_pass(ctx, agents=[agent])
    assert [(r.job, r.status, r.events) for r in runs if r.job in ("feedback", "importance")] == [
        ("feedback", "ok", 1), ("importance", "ok", 1)]
    memory.wait_for_projections()
    facts = _facts(memory, agent)
    assert facts[used]["times_retrieved"] == 3 and facts[used]["last_retrieved_at"] is not None
    assert facts[used]["importance"] > 0.5

    # the formula ranking's importance term sees it; the default ranking is unchanged
    scored = memory.retrieve(agent, "Where does Ana work?", config_overrides={"ranking": "formula"})
    by_id = {f.fact_id: f for f in scored.facts}
    assert by_id[used].scores["importance"] == pytest.approx(facts[used]["importance"], abs=1e-6)
    default = {f.fact_id: f for f in memory.retrieve(agent, "Where does Ana work?").facts}
    assert default[used].scores["importance"] == by_id[used].scores["importance"]  # exposed

    # idempotent: the same memory again (no new retrievals) emits nothing
    memory.feedback.flush()
    before = len(_job_events(memory, agent))
    runs = run_pass(ctx, agents=[agent], jobs=[j for j in JOBS if j.name == "importance"])
    assert [r.events for r in runs] == [0]
    assert len(_job_events(memory, agent)) == before

    # new notices are counted once, from where the log says the job stopped
    runs = run_pass(ctx, agents=[agent])
    assert runs[0].events == 1  # the two retrieves above (formula, default) sent notices
    assert run_pass(ctx, agents=[agent])[0].events == 0
    memory.wait_for_projections()
    assert _facts(memory, agent)[used]["times_retrieved"] == 5
    kinds = [type(e).__name__ for e in _job_events(memory, agent)]
    assert kinds.count("RetrievalsObserved") == 2


def test_feedback_of_an_agent_with_no_notices_is_zero_events(memory: Memory, nats_url: str) -> None:
    """The stream holds another agent's notices only: the job's fetch on this agent's subject
    times out empty — nats-py raises its own or the builtin ``TimeoutError`` (issue 28) — and
    the run is ``ok`` with nothing saved, not an error."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    busy, quiet = f"b-{uuid.uuid4().hex[:6]}", f"q-{uuid.uuid4().hex[:6]}"
    memory.enable_feedback(nats_url, prefix)
    for agent in (busy, quiet):
        done = memory.write(agent, "I live in Porto", speaker="Ana")
    memory.wait_for_projections(done.position)
    memory.retrieve(busy, "Where does Ana live?")
    memory.feedback.flush()
    assert memory.feedback.sent == 1
    ctx = JobContext(memory, nats_url=nats_url, prefix=prefix)
    runs = run_pass(ctx, agents=[quiet], jobs=[j for j in JOBS if j.name == "feedback"])
    assert [(r.job, r.status, r.events) for r in runs] == [("feedback", "ok", 0)], runs
    assert not [e for e in _job_events(memory, quiet) if type(e).__name__ == "RetrievalsObserved"]


def test_feedback_never_blocks_retrieve_without_a_broker(memory: Memory) -> None:
    memory.enable_feedback("nats://127.0.0.1:9", "nobroker")  # nothing listens there
    agent = f"n-{uuid.uuid4().hex[:6]}"
    done = memory.write(agent, "I live in Porto", speaker="Ana")
    memory.wait_for_projections(done.position)
    started = time.perf_counter()
    for _ in range(5):
        assert memory.retrieve(agent, "Where does Ana live?").facts
    assert time.perf_counter() - started < 5.0  # retrieve did not wait for the broker
    memory.feedback.flush(10)
    assert memory.feedback.sent == 0 and memory.feedback.dropped == 5
    memory.feedback.close()
    assert not memory.feedback._thread.is_alive()  # nothing left trying in the background


def test_a_full_feedback_queue_drops_and_says_so_once(
    nats_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Retrieve never waits for the broker: past the queue's bound notices are dropped,
    counted, and the operator is told (once per minute, not once per retrieve)."""
    from engramdb.services.jobs import feedback_stream as feedback

    monkeypatch.setattr(feedback, "QUEUE_SIZE", 2)
    publisher = feedback.FeedbackPublisher(nats_url, f"full{uuid.uuid4().hex[:6]}")
    try:
        with caplog.at_level("WARNING", logger=feedback.__name__):
            for k in range(300):
                publisher.notify("agent-full", [f"f{k}"])
        publisher.flush(30)
        assert publisher.dropped > 0
        assert publisher.sent + publisher.dropped == 300  # every notice accounted for
        full = [r for r in caplog.records if "queue full" in r.getMessage()]
        assert len(full) == 1
    finally:
        publisher.close()


def test_a_failing_or_slow_job_is_recorded_and_the_others_run(memory: Memory) -> None:
    agent = f"f-{uuid.uuid4().hex[:6]}"
    done = memory.write(agent, "I work at Vertix", speaker="Ana")
    memory.wait_for_projections(done.position)

    def broken(ctx: JobContext, agent_id: str) -> int:
        raise RuntimeError("boom")

    def slow(ctx: JobContext, agent_id: str) -> int:
        time.sleep(1.1)
        ctx.check_deadline()
        return 0

    jobs = [Job("broken", broken, ""), Job("slow", slow, ""),
            *[j for j in JOBS if j.name == "importance"]]
    ctx = JobContext(memory, timeout_sec=1.0)
    runs = run_pass(ctx, jobs, [agent])
    assert [r.status for r in runs] == ["failed", "timeout", "ok"]
    assert "boom" in (runs[0].error or "")
    with memory.pool.connection() as conn:
        rows = dict(conn.execute(
            "SELECT job, status FROM mem_job_runs WHERE agent_id = %s", (agent,)).fetchall())
    assert rows == {"broken": "failed", "slow": "timeout", "importance": "ok"}
    with pytest.raises(JobTimeout):
        ctx.deadline = time.monotonic() - 1
        ctx.check_deadline()


def test_two_runners_never_run_a_job_twice_for_an_agent(memory: Memory, pg_url: str) -> None:
    agents = [f"l-{uuid.uuid4().hex[:6]}-{i}" for i in range(3)]
    for agent in agents:
        memory.write(agent, "I work at Vertix", speaker="Ana")
        done = memory.write(agent, "My sister is called Rita", speaker="Ana")
    memory.wait_for_projections(done.position)
    importance = [j for j in JOBS if j.name == "importance"]

    # a lock held elsewhere: the runner skips that agent
    key = f"{memory.schema}/importance"
    with psycopg.connect(pg_url, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(hashtext(%s), hashtext(%s))", (key, agents[0]))
        runs = run_pass(JobContext(memory), importance, agents[:1])
        assert [r.status for r in runs] == ["skipped"]
        # unlock before closing: a closed connection's backend ends (and drops its locks)
        # asynchronously, so on a loaded box the runners below could still find it held
        other.execute("SELECT pg_advisory_unlock(hashtext(%s), hashtext(%s))", (key, agents[0]))

    # two runners at once, slowed inside the job so they overlap: never both on one agent
    # (a later pass may run a pair again once the first finished; it then emits nothing)
    gate = threading.Barrier(2)
    active: set[str] = set()
    overlaps: list[str] = []
    guard = threading.Lock()

    def slow_importance(ctx: JobContext, agent_id: str) -> int:
        with guard:
            if agent_id in active:
                overlaps.append(agent_id)
            active.add(agent_id)
        time.sleep(0.2)
        try:
            return importance[0].run(ctx, agent_id)
        finally:
            with guard:
                active.discard(agent_id)

    job = [Job("importance", slow_importance, "")]
    results: list[Any] = []

    def runner() -> None:
        gate.wait()
        results.extend(run_pass(JobContext(memory), job, agents))

    threads = [threading.Thread(target=runner) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    # a runner still going (a loaded box) or a failed run must say so, not show as a
    # missing event: the once-seen "2 events instead of 3" named neither
    assert not any(t.is_alive() for t in threads), "a runner did not finish in 120 s"
    assert overlaps == []
    assert all(r.status in ("ok", "skipped") for r in results), results
    assert any(r.status == "skipped" for r in results)
    brief = [(r.agent_id, r.status, r.events, round(r.seconds, 2)) for r in results]
    assert sum(r.events for r in results) == len(agents), brief  # each agent assessed once
    for agent in agents:
        kinds = [type(e).__name__ for e in _job_events(memory, agent)]
        assert kinds.count("ImportanceAssessed") == 1
    assert isinstance(memory.app.repository.get(agent_jobs_id(agents[0])), AgentJobs)


def test_importance_rule_orders_what_matters() -> None:
    from datetime import UTC, datetime, timedelta

    from engramdb.services.jobs.importance import FactInputs, fact_importance

    now = datetime(2025, 1, 1, tzinfo=UTC)

    def score(**kw: Any) -> float:
        base = {"fact_id": "f", "entity_key": "person:a", "times_retrieved": 0,
                "last_retrieved_at": None, "is_correction": False, "reinforcement_count": 0,
                "patterns": 0, "degree": 0}
        return fact_importance(FactInputs(**{**base, **kw}), now)

    plain = score()
    assert plain == 0.5  # the spec's starting importance, untouched
    assert score(times_retrieved=5, last_retrieved_at=now) > score(
        times_retrieved=5, last_retrieved_at=now - timedelta(days=90)) > plain
    assert score(is_correction=True) > score(reinforcement_count=1) > plain
    assert score(degree=10) > plain and score(patterns=1) > plain
    assert 0.5 <= score(times_retrieved=100, last_retrieved_at=now, is_correction=True,
                        reinforcement_count=9, patterns=9, degree=99) <= 1.0


def test_cli_jobs_run_and_the_scheduler(
    monkeypatch: pytest.MonkeyPatch, pg_url: str, nats_url: str, fresh_schema: Any
) -> None:
    from typer.testing import CliRunner

    from engramdb.services.entrypoints.cli.main import app
    from engramdb.services.jobs.schedule import JobThread

    schema, env = fresh_schema("jobscli")
    for key, value in {"DATABASE_URL": pg_url, "NATS_URL": nats_url, "DB_SCHEMA": schema,
                       "EMBEDDING_MODEL": "hash-bow-384"}.items():
        monkeypatch.setenv(f"ENGRAMDB_{key}", value)
    agent = f"cli-{uuid.uuid4().hex[:6]}"
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as memory:
        memory.wait_for_projections(memory.write(agent, "I work at Vertix", speaker="Ana").position)
        memory.write(agent, "My sister is called Rita", speaker="Ana")
        memory.wait_for_projections()
        # the scheduler of ``serve --role jobs``: runs each job on its interval, stops cleanly
        thread = JobThread(JobContext(memory, nats_url=nats_url), {"importance": 3600.0})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not _job_events(memory, agent):
            time.sleep(0.2)
        thread.stop()
        assert [type(e).__name__ for e in _job_events(memory, agent)][-1] == "ImportanceAssessed"
        # the CLI projects nothing itself (a server does): this process's projectors stand in
        result = CliRunner().invoke(app, ["jobs", "run", "--agent", agent])
        assert result.exit_code == 0, result.output
        assert "6 job run(s): 6 ok or skipped, 0 failed" in result.output
    result = CliRunner().invoke(app, ["jobs", "run", "--job", "nope"])
    assert result.exit_code == 2 and "unknown job" in result.output
    result = CliRunner().invoke(app, ["jobs", "history", "--agent", agent])
    assert '"event": "ImportanceAssessed"' in result.output


def test_agent_jobs_snapshots_load_the_same_state(fresh_schema: Any) -> None:
    from datetime import UTC, datetime

    from engramdb.services.memory.event_log import EventLog

    class Small(EventLog):
        snapshot_every = 2

    _, env = fresh_schema("jobsnap")
    app = Small(env)
    try:
        jobs = AgentJobs(agent_id="a")
        for k in range(1, 4):
            jobs.observe_retrievals({"f1": k}, {"f1": "2025-01-01T00:00:00+00:00"}, 1, k)
            jobs.assess_importance("t", {"f1": 0.5 + k / 10}, {"person:a": 0.6}, datetime.now(UTC))
            app.save(jobs)
        assert app.snapshots is not None and list(app.snapshots.get(jobs.id))
        app.forget_cached(jobs.id)
        loaded: Any = app.repository.get(jobs.id)
        assert (loaded.feedback_sequence, loaded.fact_importance) == (3, {"f1": 0.8})
        assert not loaded.observe_retrievals({"f1": 1}, {}, 1, 3)  # seen: nothing emitted
    finally:
        app.close()


def test_consolidation_finds_contradictions_repeats_and_topics(memory: Memory) -> None:
    from datetime import UTC, datetime, timedelta

    from engramdb.domain.payloads import FactPayload

    agent = f"p-{uuid.uuid4().hex[:6]}"
    t0 = datetime(2025, 3, 1, tzinfo=UTC)
    mem = memory.app.agent_memory(agent)
    mem.register_entity("person:ana", "Ana", "person", None, {"by": "t"})

    def add(fid: str, text: str, attribute: str | None = None, days: int = 0) -> None:
        mem.add_fact(FactPayload(
            fact_id=fid, entity_key="person:ana", linked_entities=[], attribute_key=attribute,
            text=text, category="general", confidence=0.8, importance=0.5,
            source_message_id=f"m-{fid}", source_message_ids=[f"m-{fid}"], speaker="Ana",
            valid_from=datetime.now(UTC) - timedelta(days=days), decided_by={"by": "t"}))

    add("f1", "Ana lives in Porto", "residence")
    add("f2", "Ana lives in Lisbon", "residence")
    add("f3", "Ana likes green tea")
    mem.confirm_fact("f3", "m-x", datetime.now(UTC))
    mem.confirm_fact("f3", "m-y", datetime.now(UTC))
    add("f4", "Ana was born in 1990", days=400)
    memory.app.save(mem)
    memory.wait_for_projections()
    consolidation = [j for j in JOBS if j.name == "consolidation"]
    ctx = JobContext(memory)
    assert run_pass(ctx, consolidation, [agent])[0].events == 3
    memory.wait_for_projections()
    with memory.pool.connection() as conn:
        rows = {r[0]: r[1:] for r in conn.execute(
            "SELECT kind, pattern_text, supporting_fact_ids, method FROM mem_patterns "
            "WHERE agent_id = %s", (agent,))}
    assert set(rows) == {"contradiction", "repeated", "recurring topic"}
    assert rows["contradiction"][1] == ["f1", "f2"] and "Porto" in rows["contradiction"][0]
    assert rows["repeated"][1] == ["f3"] and "3 times" in rows["repeated"][0]
    assert "f4" not in rows["recurring topic"][1]  # older than the lookback
    assert rows["contradiction"][2] == "deterministic:contradiction"
    result = memory.retrieve(agent, "Where does Ana live?")
    assert "Observed patterns:" in result.context and "Conflicting facts" in result.context
    assert run_pass(ctx, consolidation, [agent])[0].events == 0  # idempotent

    # pattern participation raises importance
    run_pass(ctx, [j for j in JOBS if j.name == "importance"], [agent])
    memory.wait_for_projections()
    facts = _facts(memory, agent)
    assert facts["f3"]["importance"] > facts["f4"]["importance"]

    # resolving the contradiction retires it (and the topic pattern changes)
    mem = memory.app.agent_memory(agent)
    mem.retract_fact("f1", None, datetime.now(UTC), "wrong", {"by": "t"})
    memory.app.save(mem)
    memory.wait_for_projections()
    assert run_pass(ctx, consolidation, [agent])[0].events >= 1
    memory.wait_for_projections()
    with memory.pool.connection() as conn:
        kinds = {r[0] for r in conn.execute(
            "SELECT kind FROM mem_patterns WHERE agent_id = %s", (agent,))}
    assert kinds == {"repeated"}  # 2 recent facts left: no longer a recurring topic
    names = [type(e).__name__ for e in _job_events(memory, agent)]
    assert names.count("PatternRetired") == 2 and t0 < datetime.now(UTC)
