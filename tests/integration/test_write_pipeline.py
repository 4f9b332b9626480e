"""Write pipeline (docs/spec.md §2) against a REAL PostgreSQL event store.

The only fake is the LLM: ``infra.providers.scripted.ScriptedLLM`` (a TEST DOUBLE that
answers from a table keyed by the message text found in the prompt, and raises
``NoScriptedAnswer`` for anything unscripted), driven through the real ``LLMExtractor``.
Projections are not needed: assertions read the event log itself.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engramdb.domain.aggregate import MessageRecord
from engramdb.domain.keys import message_record_id, new_fact_id
from engramdb.infra.providers.scripted import Answer, ScriptedLLM
from engramdb.projections.schema import read_model_ddl
from engramdb.services.extraction import LLMExtractor
from engramdb.services.memory.event_log import EventLog
from engramdb.services.write.messages import (
    MAX_TEXT_BYTES,
    ConversationMessage,
    InvalidMessage,
    parse_message,
)
from engramdb.services.write.pipeline import WritePipeline
from engramdb.services.write.pre_retrieval import PreRetrieval

WHEN = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


# ----- honest scripted doubles (shared with test_ingest / test_failsafe / bench) -------------


def message_key(messages: Sequence[dict[str, Any]]) -> str:
    """Key of the scripted extraction table: the message text inside the extraction prompt."""
    user = next(m["content"] for m in reversed(messages) if m.get("role") == "user")
    if 'Message:\n"""\n' in user:
        return user.split('Message:\n"""\n', 1)[1].rsplit('\n"""', 1)[0]
    return user


def fact(text: str, entity: str = "Ana", **extra: Any) -> dict[str, Any]:
    return {"text": text, "entity": entity, "confidence_level": "explicit_statement", **extra}


def extraction_json(*facts: dict[str, Any], entities: Sequence[tuple[str, str]] = (), rels: Sequence[tuple[str, str, str]] = ()) -> str:
    return json.dumps(
        {
            "facts": list(facts),
            "entities": [{"name": n, "entity_type": t} for n, t in entities],
            "relationships": [{"source": s, "target": t, "relation_type": r} for s, t, r in rels],
        }
    )


def scripted_extractor(table: Mapping[str, Answer], timeout_sec: float = 5.0) -> tuple[LLMExtractor, ScriptedLLM]:
    llm = ScriptedLLM(dict(table), name="scripted-extractor", key_fn=message_key)
    return LLMExtractor(llm, timeout_sec=timeout_sec), llm


def msg(agent: str, text: str, message_id: str, speaker: str | None = "Ana", **kw: Any) -> ConversationMessage:
    return ConversationMessage(agent_id=agent, message_id=message_id, speaker=speaker, text=text, occurred_at=WHEN, **kw)


def topics(app: EventLog, agent_id: str) -> list[str]:
    return [type(e).__qualname__.split(".")[-1] for e in app.agent_events(agent_id)]


def active_fact_texts(app: EventLog, agent_id: str) -> list[str]:
    """Replay the agent's log (fresh, no cache) and list the active facts' texts."""
    state: dict[str, str] = {}
    for event in app.agent_events(agent_id):
        name = type(event).__qualname__.split(".")[-1]
        if name in ("FactAdded", "FactUpdated"):
            state[event.fact_id] = event.text
            if name == "FactUpdated":
                state.pop(event.supersedes_fact_id, None)
        elif name == "FactRetracted":
            state.pop(event.fact_id, None)
    return sorted(state.values())


@pytest.fixture
def app(es_env: dict[str, str]) -> Any:
    application = EventLog(es_env)
    yield application
    application.close()


# ----- tests -----------------------------------------------------------------------------------


def test_write_records_message_and_decisions_atomically(app: EventLog, agent_id: str) -> None:
    text = "I live in Porto and I work at Vertix."
    extractor, llm = scripted_extractor(
        {
            text: extraction_json(
                fact("Ana lives in Porto", mentions=["Porto"], attribute_key="residence"),
                fact("Ana works at Vertix", mentions=["Vertix"], attribute_key="workplace"),
                entities=[("Ana", "person"), ("Porto", "place"), ("Vertix", "organization")],
                rels=[("Ana", "Vertix", "works_at")],
            )
        }
    )
    pipeline = WritePipeline(app, extractor)
    result = pipeline.write(msg(agent_id, text, "m1"))

    assert not result.duplicate and result.extraction_error is None
    assert result.llm_calls == 1 and len(llm.calls) == 1
    assert [d.kind for d in result.decisions].count("ADD") == 2
    assert {d.entity_key for d in result.decisions if d.kind == "ENTITY"} == {
        "person:ana", "place:porto", "organization:vertix"
    }
    assert result.position > 0 and result.rejected == []
    assert active_fact_texts(app, agent_id) == ["Ana lives in Porto", "Ana works at Vertix"]
    assert "RelationshipObserved" in topics(app, agent_id)

    record = app.repository.get(message_record_id(agent_id, "m1"))
    assert isinstance(record, MessageRecord) and record.processed and record.text == text
    stored = list(app.events.get(record.id))
    assert [type(e).__qualname__.split(".")[-1] for e in stored] == ["Recorded", "Processed"]
    processed = stored[1]
    assert processed.extractor["extractor"] == "llm" and processed.llm_calls == 1
    assert json.loads(processed.raw_output)["facts"][0]["text"] == "Ana lives in Porto"
    assert processed.decisions["ADD"] == 2
    # the position is the notification id of the last event of that one atomic save
    assert app.recorder.max_notification_id() >= result.position


def test_redelivered_message_is_a_noop(app: EventLog, agent_id: str) -> None:
    text = "My dog is called Rex."
    extractor, llm = scripted_extractor({text: extraction_json(fact("Ana has a dog called Rex"))})
    pipeline = WritePipeline(app, extractor)
    results = [pipeline.write(msg(agent_id, text, "same-id")) for _ in range(3)]
    # a second pipeline (other process, cold cache) sees the same record
    other = EventLog(dict(app.env))
    try:
        results.append(WritePipeline(other, extractor).write(msg(agent_id, text, "same-id")))
    finally:
        other.close()
    assert [r.duplicate for r in results] == [False, True, True, True]
    assert len(llm.calls) == 1
    assert all(r.decisions == [] for r in results[1:])
    assert topics(app, agent_id).count("FactAdded") == 1


def test_recorded_but_unprocessed_message_is_resumed(app: EventLog, agent_id: str) -> None:
    text = "I moved to Lisbon."
    app.save(MessageRecord(agent_id=agent_id, message_id="crashed", session_id=None, speaker="Ana",
                           text=text, occurred_at=WHEN, metadata={}))
    extractor, _ = scripted_extractor({text: extraction_json(fact("Ana lives in Lisbon", attribute_key="residence"))})
    result = WritePipeline(app, extractor).write(msg(agent_id, text, "crashed"))
    assert result.resumed and not result.duplicate
    assert [d.kind for d in result.decisions if d.kind == "ADD"] == ["ADD"]
    assert app.message_record(agent_id, "crashed").processed


def test_update_supersedes_and_unknown_target_still_adds(app: EventLog, agent_id: str) -> None:
    first, second, third = "I live in Porto.", "I moved to Lisbon.", "I also like jazz."
    old_id = new_fact_id(agent_id, "m1", 0)
    extractor, _ = scripted_extractor(
        {
            first: extraction_json(fact("Ana lives in Porto", attribute_key="residence")),
            second: extraction_json(fact("Ana lives in Lisbon", action="UPDATE", target_fact_id=old_id, attribute_key="residence")),
            third: extraction_json(fact("Ana likes jazz", action="UPDATE", target_fact_id="f_does_not_exist")),
        }
    )
    pipeline = WritePipeline(app, extractor)
    pipeline.write(msg(agent_id, first, "m1"))
    r2 = pipeline.write(msg(agent_id, second, "m2"))
    assert [(d.kind, d.target_fact_id) for d in r2.decisions if d.kind == "UPDATE"] == [("UPDATE", old_id)]
    r3 = pipeline.write(msg(agent_id, third, "m3"))
    assert len(r3.rejected) == 1 and "not an active fact" in r3.rejected[0].reason
    assert [d.kind for d in r3.decisions if d.kind in ("ADD", "UPDATE")] == ["ADD"]
    assert active_fact_texts(app, agent_id) == ["Ana likes jazz", "Ana lives in Lisbon"]


def test_pre_retrieval_reads_projections_and_is_fail_safe(
    app: EventLog, agent_id: str, pg_url: str, fresh_schema: Any
) -> None:
    schema, _env = fresh_schema("pre")
    # Without read-model tables it answers None (the pipeline then uses the aggregate).
    missing = PreRetrieval(pg_url, schema=schema)
    assert missing.context(agent_id, "hello Carol", "Ana") is None
    missing.close()

    with psycopg.connect(pg_url, autocommit=True, options=f"-c search_path={schema},public") as conn:
        for ddl in read_model_ddl(8):
            if "pg_trgm" in ddl or "gin_trgm_ops" in ddl:
                continue  # optional extension; not needed here
            conn.execute(ddl)
        conn.execute(
            "INSERT INTO mem_entities VALUES (%s,'person:carolina','Carolina','person','Ana''s sister',NULL,now())",
            (agent_id,),
        )
        conn.execute("INSERT INTO mem_aliases VALUES (%s,'carol','Carol','person:carolina')", (agent_id,))
        for i, text in enumerate(["Carolina lives in Recife", "Carolina is a nurse", "Carolina likes surfing"]):
            conn.execute(
                "INSERT INTO mem_facts (agent_id, fact_id, entity_key, fact_text, confidence, valid_from, recorded_at)"
                " VALUES (%s, %s, 'person:carolina', %s, 0.9, now(), now())",
                (agent_id, f"f{i}", text),
            )
        conn.execute(
            "INSERT INTO mem_facts (agent_id, fact_id, entity_key, fact_text, confidence, valid_from, recorded_at, valid_to)"
            " VALUES (%s, 'old', 'person:carolina', 'Carolina lives in Natal', 0.9, now(), now(), now())",
            (agent_id,),
        )
    pre = PreRetrieval(pg_url, schema=schema, topk=2)
    try:
        ctx = pre.context(agent_id, "Carol went surfing in Recife", "Ana")
        assert ctx is not None
        assert [e.entity_key for e in ctx.entities] == ["person:carolina"]
        assert ctx.entities[0].profile_text == "Ana's sister"
        texts = [f.text for f in ctx.facts]
        assert len(texts) == 2 and "Carolina lives in Natal" not in texts  # active only, top-k
        assert set(texts) == {"Carolina lives in Recife", "Carolina likes surfing"}  # overlap first

        seen: list[Any] = []

        class Spy:
            info = LLMExtractor(ScriptedLLM({})).info

            def extract(self, request: Any) -> Any:
                seen.append(request)
                from engramdb.services.extraction import ExtractionOutcome

                return ExtractionOutcome()

        WritePipeline(app, Spy(), pre_retrieval=pre).write(msg(agent_id, "Carol went surfing in Recife", "p1"))
        assert [f.fact_id for f in seen[0].known_facts] == [f.fact_id for f in ctx.facts]
    finally:
        pre.close()


def test_two_workers_on_one_agent_lose_nothing_and_duplicate_nothing(es_env: dict[str, str], agent_id: str) -> None:
    """Two applications (two 'processes', separate caches) write overlapping messages in parallel."""
    texts = [f"Fact number {i} about Ana." for i in range(12)]
    table = {t: extraction_json(fact(f"Ana fact {i}"), fact("Ana is a person")) for i, t in enumerate(texts)}
    apps = [EventLog(es_env), EventLog(es_env)]
    results: list[Any] = []
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        extractor, _ = scripted_extractor(table)
        pipeline = WritePipeline(apps[index], extractor)
        order = texts if index == 0 else list(reversed(texts))
        try:
            for _i, text in enumerate(order):
                mid = f"m{texts.index(text)}"
                results.append(pipeline.write(msg(agent_id, text, mid)))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == []
        assert len(results) == 24
        print("conflicts re-decided:", sum(r.conflicts for r in results),
              "duplicates:", sum(r.duplicate for r in results))
        processed = [r for r in results if not r.duplicate]
        assert sorted(r.message_id for r in processed) == sorted(f"m{i}" for i in range(12))
        names = topics(apps[0], agent_id)
        adds = [e.text for e in apps[0].agent_events(agent_id) if type(e).__qualname__.endswith("FactAdded")]
        assert Counter(adds).most_common(1)[0][1] == 1, "a fact was added twice"
        assert sorted(adds) == sorted(["Ana is a person", *[f"Ana fact {i}" for i in range(12)]])
        assert names.count("FactConfirmed") == 11  # the repeated statement is a NOOP, never lost
        for i in range(12):
            assert apps[1].message_record(agent_id, f"m{i}").processed
    finally:
        for a in apps:
            a.close()


# ----- validation + pipeline on arbitrary payloads ------------------------------------------

_payload_values = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=50),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
_texts = st.one_of(
    st.just(""), st.just("   "), st.just("a\x00b"), st.just("x" * (MAX_TEXT_BYTES + 1)),
    st.just("é" * (MAX_TEXT_BYTES // 2)), st.just("\ud800 lone surrogate"),
    st.text(min_size=1, max_size=200),  # odd unicode of every category
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.one_of(_texts, _payload_values),
    extra=st.dictionaries(st.sampled_from(["speaker", "session_id", "occurred_at", "metadata", "message_id"]),
                          _payload_values, max_size=2),
)
def test_arbitrary_payloads_get_a_clear_error_or_are_stored_intact(
    app: EventLog, agent_id: str, text: Any, extra: dict[str, Any]
) -> None:
    payload = {"agent_id": agent_id, "text": text, **extra}
    try:
        raw = json.dumps(payload).encode()
    except (ValueError, TypeError):
        return
    try:
        message = parse_message(raw)
    except InvalidMessage as exc:
        assert exc.reason and "\n" not in exc.reason
        return
    pipeline = WritePipeline(app, scripted_extractor({})[0])  # unscripted: extraction fails safe
    before = app.agent_events(agent_id)
    result = pipeline.write(message)
    record = app.message_record(agent_id, message.message_id)
    assert record is not None and record.processed
    assert record.text == message.text and record.metadata == message.metadata
    assert result.duplicate or result.extraction_error  # the scripted LLM knows nothing
    after = app.agent_events(agent_id)
    assert [e.originator_version for e in after[: len(before)]] == [e.originator_version for e in before]


def test_one_megabyte_text_is_rejected_with_reason() -> None:
    with pytest.raises(InvalidMessage, match="payload is|limit"):
        parse_message(json.dumps({"agent_id": "a1", "text": "x" * (1 << 20)}).encode())
    with pytest.raises(InvalidMessage, match="NUL"):
        parse_message(json.dumps({"agent_id": "a1", "text": "a\x00b"}))
    with pytest.raises(InvalidMessage, match="agent_id"):
        parse_message({"agent_id": "bad id with spaces", "text": "hi"})
    naive = parse_message({"agent_id": "a1", "text": "hi", "occurred_at": "2024-01-01T10:00:00"})
    assert naive.occurred_at.tzinfo is not None and naive.occurred_at.utcoffset().total_seconds() == 0



def test_conflict_redecides_on_fresh_state_without_a_second_llm_call(es_env: dict[str, str], agent_id: str) -> None:
    """Deterministic conflict: while worker A waits for its LLM, worker B saves for the agent."""
    app_a, app_b = EventLog(es_env), EventLog(es_env)
    try:
        b_extractor, _ = scripted_extractor({"B says": extraction_json(fact("Ana likes tea"))})
        pipeline_b = WritePipeline(app_b, b_extractor)
        pipeline_b.write(msg(agent_id, "warm up", "w0"))  # the agent exists in both caches' view

        def a_answer(messages: Sequence[dict[str, Any]]) -> str:
            pipeline_b.write(msg(agent_id, "B says", "b1"))  # lands while A is "thinking"
            return extraction_json(fact("Ana likes tea"), fact("Ana likes coffee"))

        a_llm = ScriptedLLM(a_answer, name="scripted-a")
        pipeline_a = WritePipeline(app_a, LLMExtractor(a_llm))
        app_a.agent_memory(agent_id)  # cache A's (soon stale) state
        result = pipeline_a.write(msg(agent_id, "A says", "a1"))
        assert result.conflicts == 1 and len(a_llm.calls) == 1 and result.llm_calls == 1
        # decided on fresh state: B's "likes tea" is now known → NOOP, not a duplicate ADD
        assert sorted(d.kind for d in result.decisions if d.kind in ("ADD", "NOOP")) == ["ADD", "NOOP"]
        assert active_fact_texts(app_a, agent_id) == ["Ana likes coffee", "Ana likes tea"]
    finally:
        app_a.close()
        app_b.close()
