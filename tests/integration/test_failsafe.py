"""docs/spec.md §2 fail-safe table, every row made to happen against the REAL event store.

| failure                                   | expected                                              |
|-------------------------------------------|-------------------------------------------------------|
| extraction timeout / malformed JSON /     | message recorded + processed, empty extraction,       |
| provider exception / extractor raises     | error recorded (and the raw output, when there is one) |
| resolution fallback fails / times out /   | a new entity (a duplicate beats lost data)            |
| names a non-candidate                     |                                                       |
| UPDATE/RETRACT of an unknown/inactive id  | rejected and recorded; the other decisions are saved   |
| reconciliation raises                     | facts are ADDed                                       |

LLMs are ``ScriptedLLM`` TEST DOUBLES (answers from a table or a scripted function; they
raise or sleep only when the test scripts them to).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from test_write_pipeline import (
    active_fact_texts,
    extraction_json,
    fact,
    message_key,
    msg,
    scripted_extractor,
    topics,
)

from engramdb.domain.keys import new_fact_id
from engramdb.infra.providers.errors import ProviderError
from engramdb.infra.providers.scripted import ScriptedLLM
from engramdb.services.extraction import LLMExtractor
from engramdb.services.memory.event_log import EventLog
from engramdb.services.write import pipeline as write_module
from engramdb.services.write.pipeline import WriteConfig, WritePipeline


@pytest.fixture
def app(es_env: dict[str, str]) -> Iterator[EventLog]:
    application = EventLog(es_env)
    yield application
    application.close()


def processed_event(app: EventLog, agent_id: str, message_id: str) -> Any:
    record = app.message_record(agent_id, message_id)
    assert record is not None and record.processed, "the message must be recorded and processed"
    events = list(app.events.get(record.id))
    return events[-1]


# ----- extraction ------------------------------------------------------------------------------


def _slow(messages: Sequence[dict[str, Any]]) -> str:
    time.sleep(1.0)
    return extraction_json(fact("too late"))


@pytest.mark.parametrize(
    ("answer", "timeout", "error_part", "raw_kept"),
    [
        ("{this is not json", 5.0, "malformed JSON", True),
        (ProviderError("HTTP 400: bad request"), 5.0, "ProviderError", False),
    ],
    ids=["malformed-json", "provider-exception"],
)
def test_extraction_failure_records_message_with_empty_extraction(
    app: EventLog, agent_id: str, answer: Any, timeout: float, error_part: str, raw_kept: bool
) -> None:
    text = "I live in Porto."
    if callable(answer) and not isinstance(answer, BaseException):
        llm = ScriptedLLM(answer, name="scripted-slow")
    else:
        llm = ScriptedLLM({text: answer}, key_fn=message_key)
    started = time.perf_counter()
    result = WritePipeline(app, LLMExtractor(llm, timeout_sec=timeout)).write(msg(agent_id, text, "m1"))
    assert time.perf_counter() - started < 0.9  # a hung provider does not hold the pipeline
    assert result.extraction_error and error_part in result.extraction_error
    assert [d.kind for d in result.decisions if d.kind in ("ADD", "UPDATE")] == []
    done = processed_event(app, agent_id, "m1")
    assert error_part in done.error
    # an empty extraction: nothing in any part (directives and emotion joined them, ADR-0045)
    assert set(done.extraction) >= {"facts", "entities", "relationships"}
    assert not any(done.extraction.values()), done.extraction
    assert (done.raw_output == "{this is not json") if raw_kept else done.raw_output is None
    assert app.message_record(agent_id, "m1").text == text


def test_extraction_timeout_is_an_outage_not_an_empty_extraction(app: EventLog, agent_id: str) -> None:
    """A timeout is transient (ADR-0014): the message stays recorded and pending, not
    processed with an empty extraction; a hung provider still does not hold the pipeline."""
    started = time.perf_counter()
    llm = ScriptedLLM(_slow, name="scripted-slow")
    result = WritePipeline(app, LLMExtractor(llm, timeout_sec=0.2)).write(msg(agent_id, "I live in Porto.", "m1"))
    assert time.perf_counter() - started < 0.9
    assert result.extraction_pending and "timed out" in (result.extraction_error or "")
    assert result.decisions == []
    record = app.message_record(agent_id, "m1")
    assert record is not None and not record.processed and record.extraction_pending
    deferred = list(app.events.get(record.id))[-1]
    assert type(deferred).__name__ == "ExtractionDeferred" and "timed out" in deferred.reason


def test_extractor_that_raises_is_contained(app: EventLog, agent_id: str) -> None:
    class Exploding:
        info = LLMExtractor(ScriptedLLM({})).info

        def extract(self, request: Any) -> Any:
            raise RuntimeError("extractor bug")

    result = WritePipeline(app, Exploding()).write(msg(agent_id, "Hello there", "m1"))
    assert "extractor bug" in (result.extraction_error or "")
    assert "extractor bug" in processed_event(app, agent_id, "m1").error


# ----- entity resolution ------------------------------------------------------------------------


def _seed_carolina(app: EventLog, agent_id: str) -> None:
    extractor, _ = scripted_extractor(
        {"My sister Carolina is a nurse.": extraction_json(
            fact("Carolina is a nurse", entity="Carolina"), entities=[("Carolina", "person")])}
    )
    WritePipeline(app, extractor).write(msg(agent_id, "My sister Carolina is a nurse.", "seed"))


AMBIGUOUS_TEXT = "Carolyn called me today."
AMBIGUOUS_EXTRACTION = extraction_json(fact("Carolyn called Ana", entity="Carolyn", mentions=["Ana"]),
                                       entities=[("Carolyn", "person"), ("Ana", "person")])


@pytest.mark.parametrize(
    ("resolver_answer", "expected_key", "note"),
    [
        (ProviderError("resolver down"), "person:carolyn", "failed"),
        ("__sleep__", "person:carolyn", "timed out"),
        ('{"match": "person:somebody-else"}', "person:carolyn", "non-candidate"),
        ("not json", "person:carolyn", "malformed JSON"),
        ('{"match": "person:carolina"}', "person:carolina", None),
    ],
    ids=["fails", "times-out", "non-candidate", "malformed", "answers"],
)
def test_ambiguous_name_resolution_fallback(
    app: EventLog, agent_id: str, resolver_answer: Any, expected_key: str, note: str | None
) -> None:
    _seed_carolina(app, agent_id)
    extractor, extract_llm = scripted_extractor({AMBIGUOUS_TEXT: AMBIGUOUS_EXTRACTION})

    def resolve(messages: Sequence[dict[str, Any]]) -> str:
        assert "Carolyn" in messages[-1]["content"] and "person:carolina" in messages[-1]["content"]
        if resolver_answer == "__sleep__":
            time.sleep(1.0)
            return '{"match": "person:carolina"}'
        if isinstance(resolver_answer, BaseException):
            raise resolver_answer
        return resolver_answer

    resolver = ScriptedLLM(resolve, name="scripted-resolver")
    pipeline = WritePipeline(app, extractor, resolver_llm=resolver, config=WriteConfig(resolution_timeout_sec=0.2))
    result = pipeline.write(msg(agent_id, AMBIGUOUS_TEXT, "m1"))
    assert len(resolver.calls) == 1 and result.llm_calls == 2  # extraction + one resolution call
    added = [d for d in result.decisions if d.kind == "ADD"]
    assert [d.entity_key for d in added] == [expected_key]
    error = processed_event(app, agent_id, "m1").error
    if note is None:
        assert error is None
        assert ("ALIAS", "person:carolina") in [(d.kind, d.entity_key) for d in result.decisions]
    else:
        assert note in error
        assert ("ENTITY", "person:carolyn") in [(d.kind, d.entity_key) for d in result.decisions]
    assert len(extract_llm.calls) == 1  # one extraction call for the message, never repeated


def test_disabled_llm_resolution_creates_new_entity(app: EventLog, agent_id: str) -> None:
    _seed_carolina(app, agent_id)
    extractor, _ = scripted_extractor({AMBIGUOUS_TEXT: AMBIGUOUS_EXTRACTION})
    resolver = ScriptedLLM({}, name="never-called")
    pipeline = WritePipeline(app, extractor, resolver_llm=resolver, config=WriteConfig(enable_llm_resolution=False))
    result = pipeline.write(msg(agent_id, AMBIGUOUS_TEXT, "m1"))
    assert resolver.calls == []
    assert [d.entity_key for d in result.decisions if d.kind == "ADD"] == ["person:carolyn"]


# ----- reconciliation ---------------------------------------------------------------------------


def test_unknown_or_inactive_target_is_rejected_and_recorded_others_saved(app: EventLog, agent_id: str) -> None:
    first, second = "I live in Porto.", "I moved to Lisbon, and I stopped smoking, and I like tea."
    porto = new_fact_id(agent_id, "m1", 0)
    extractor, _ = scripted_extractor(
        {
            first: extraction_json(fact("Ana lives in Porto", attribute_key="residence")),
            second: extraction_json(
                fact("Ana lives in Lisbon", action="UPDATE", target_fact_id=porto, attribute_key="residence"),
                fact("Ana no longer lives in Porto", action="RETRACT", target_fact_id=porto),  # inactive now
                fact("Ana stopped smoking", action="RETRACT", target_fact_id="f_unknown"),
                fact("Ana likes tea", action="UPDATE", target_fact_id="f_unknown_too"),
            ),
        }
    )
    pipeline = WritePipeline(app, extractor)
    pipeline.write(msg(agent_id, first, "m1"))
    result = pipeline.write(msg(agent_id, second, "m2"))
    reasons = [r.reason for r in result.rejected]
    assert len(reasons) == 3 and all("not an active fact" in r for r in reasons)
    assert active_fact_texts(app, agent_id) == ["Ana likes tea", "Ana lives in Lisbon"]  # UPDATE of unknown → ADD
    rejected_events = [e for e in app.agent_events(agent_id) if type(e).__qualname__.endswith("DecisionRejected")]
    assert [e.message_id for e in rejected_events] == ["m2"] * 3
    assert {e.decision["target_fact_id"] for e in rejected_events} == {porto, "f_unknown", "f_unknown_too"}
    assert processed_event(app, agent_id, "m2").decisions["REJECTED"] == 3


def test_reconciliation_error_falls_back_to_add(
    app: EventLog, agent_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The domain's reconciliation is made to raise once (a bug, say): facts are still ADDed."""
    text = "I live in Porto and I like tea."
    extractor, _ = scripted_extractor(
        {text: extraction_json(fact("Ana lives in Porto", action="UPDATE", target_fact_id="f_x"), fact("Ana likes tea"))}
    )
    real = write_module.apply_extraction
    calls: list[int] = []

    def failing_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            memory = args[0]
            memory.reject("m1", {"half": "applied"}, "half-applied before the crash")
            raise KeyError("reconciliation bug")
        return real(*args, **kwargs)

    monkeypatch.setattr(write_module, "apply_extraction", failing_once)
    result = WritePipeline(app, extractor).write(msg(agent_id, text, "m1"))
    assert [d.kind for d in result.decisions if d.kind in ("ADD", "UPDATE")] == ["ADD", "ADD"]
    assert active_fact_texts(app, agent_id) == ["Ana likes tea", "Ana lives in Porto"]
    # the half-applied event of the failed attempt was discarded, not saved
    assert "DecisionRejected" not in topics(app, agent_id)
    assert "reconciliation failed" in processed_event(app, agent_id, "m1").error


def test_storage_failure_raises_so_the_caller_can_retry(es_env: dict[str, str], agent_id: str) -> None:
    """Database unreachable: ``write`` raises (ingest nacks); nothing is half-saved."""
    bad_env = dict(es_env, POSTGRES_PORT="1", POSTGRES_CONNECT_TIMEOUT="1")
    extractor, llm = scripted_extractor({"Hi.": extraction_json()})
    try:
        broken = EventLog(bad_env)
    except Exception:  # noqa: BLE001 — some versions connect eagerly: also a clear failure
        return
    with pytest.raises(Exception):  # noqa: B017, PT011 — any storage error, surfaced
        WritePipeline(broken, extractor).write(msg(agent_id, "Hi.", "m1"))
    assert llm.calls == []  # nothing is paid for before the message is recorded
    ok = EventLog(es_env)
    try:
        assert ok.message_record(agent_id, "m1") is None
    finally:
        ok.close()


def test_raw_output_is_kept_verbatim(app: EventLog, agent_id: str) -> None:
    raw = extraction_json(fact("Ana likes tea"))
    extractor, _ = scripted_extractor({"I like tea.": raw})
    WritePipeline(app, extractor).write(msg(agent_id, "I like tea.", "m1"))
    assert json.loads(processed_event(app, agent_id, "m1").raw_output) == json.loads(raw)
