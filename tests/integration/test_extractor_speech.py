"""What people actually say (EN and PT), end to end, and bounded LLM output (issue 9, items 5-6).

The offline extractor is exercised on its own (deterministic, no database) and through the
real write pipeline against a REAL PostgreSQL event store; assertions read the event log.
Two ways of giving the extractor what memory knows are covered: no pre-retrieval (the
aggregate fallback shows no facts, so reconciliation finds targets by attribute key and by
fingerprint) and ``LogPreRetrieval`` below, a TEST DOUBLE of the projection-backed
pre-retrieval that lists the agent's active facts by replaying its real event log.

The LLM is ``ScriptedLLM`` (answers only what the test scripted) or the real ``OpenAILLM``
against the fake OpenAI HTTP server, which cuts answers at ``max_tokens`` as real servers do.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from engramdb.domain.aggregate import AgentMemory
from engramdb.domain.extraction import ExtractionInput, KnownFact
from engramdb.infra.providers import OpenAILLM, ScriptedLLM
from engramdb.services.extraction import LLMExtractor, RuleBasedExtractor
from engramdb.services.extraction.llm_budget import (
    PER_FACT_TOKENS,
    extraction_fact_cap,
    extraction_max_tokens,
    rerank_max_tokens,
    resolution_max_tokens,
)
from engramdb.services.memory.event_log import EventLog
from engramdb.services.retrieve.rerank import rerank
from engramdb.services.write.messages import ConversationMessage
from engramdb.services.write.pipeline import WritePipeline
from engramdb.services.write.pre_retrieval import PreRetrievalResult, aggregate_context
from tests.support.fake_openai_server import run_fake_openai

WHEN = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def extract(text: str, speaker: str | None = "Rita", facts: list[KnownFact] | None = None) -> Any:
    request = ExtractionInput(
        agent_id="a", message_id="m", speaker=speaker, text=text, occurred_at=WHEN,
        known_facts=facts or [],
    )
    outcome = RuleBasedExtractor().extract(request)
    assert outcome.error is None
    return outcome.extraction


def known(fact_id: str, text: str, attribute: str | None = None, key: str = "person:rita") -> KnownFact:
    return KnownFact(fact_id=fact_id, text=text, entity_key=key, attribute_key=attribute)


# ----- the offline extractor alone -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "new_text"),
    [
        ("I no longer work at Acme, I now work at Globex.", "Rita now works at Globex."),
        ("I don't work at Acme anymore. I work at Globex now.", "Rita works at Globex now."),
        ("Não trabalho mais na Acme, agora trabalho na Globex.", "Rita agora trabalha na Globex."),
    ],
)
def test_job_change_is_one_update_of_the_known_job(text: str, new_text: str) -> None:
    job = known("f-acme", "Rita works at Acme", "workplace")
    [fact] = extract(text, facts=[job]).facts
    assert (fact.action, fact.target_fact_id, fact.attribute_key) == ("UPDATE", "f-acme", "workplace")
    assert (fact.entity, fact.text) == ("Rita", new_text)
    # With no known job in view: only the new job (reconciliation supersedes by attribute).
    [plain] = extract(text).facts
    assert (plain.action, plain.text, plain.attribute_key) == ("NEW", new_text, "workplace")


@pytest.mark.parametrize(
    ("text", "speaker", "statement", "stored"),
    [
        ("Forget that I like sushi", "Rita", "Rita likes sushi", "Rita likes sushi."),
        ("Please forget that I like sushi.", "Rita", "Rita likes sushi", "Rita likes sushi."),
        ("Esquece que eu gosto de futebol", "Rita", "Rita gosta de futebol", "Rita gosta de futebol."),
        ("Esqueça que eu gosto de futebol.", None, "eu gosto de futebol", "Eu gosto de futebol."),
    ],
)
def test_forget_request_is_a_retraction_never_a_fact(
    text: str, speaker: str | None, statement: str, stored: str
) -> None:
    key = "person:rita" if speaker else "person:user"
    facts = [known("f-other", "Rita lives in Lisbon", "residence", key), known("f-it", stored, None, key)]
    [fact] = extract(text, speaker, facts).facts
    assert (fact.action, fact.target_fact_id, fact.text) == ("RETRACT", "f-it", statement)
    # Nothing known in view: still a RETRACT (reconciliation matches the text, or rejects).
    [blind] = extract(text, speaker).facts
    assert (blind.action, blind.target_fact_id) == ("RETRACT", None)


def test_compound_sentence_is_one_fact_per_attribute() -> None:
    ex = extract("I live in Lisbon and work at Acme.")
    assert [(f.text, f.attribute_key) for f in ex.facts] == [
        ("Rita lives in Lisbon", "residence"),
        ("Rita works at Acme.", "workplace"),
    ]
    rels = {(r.source, r.relation_type, r.target) for r in ex.relationships}
    assert rels == {("Rita", "lives_in", "Lisbon"), ("Rita", "works_at", "Acme")}
    pt = extract("Eu moro em Lisboa e trabalho na Natura.", speaker="Joana")
    assert [(f.text, f.attribute_key) for f in pt.facts] == [
        ("Joana mora em Lisboa", "residence"),
        ("Joana trabalha na Natura.", "workplace"),
    ]
    # An elided subject is the head's: a third person stays third person, and "my" names
    # the speaker (in memory, "my" would mean whoever reads the fact).
    carlos = extract("My brother Carlos lives in Porto and works at Vertix.")
    assert [(f.entity, f.text, f.attribute_key) for f in carlos.facts] == [
        ("Carlos", "Rita's brother Carlos lives in Porto", "residence"),
        ("Carlos", "Rita's brother Carlos works at Vertix.", "workplace"),
    ]
    # Another first person left in the sentence: kept as said rather than half rewritten.
    assert [f.text for f in extract("My brother Carlos visits me in Porto.").facts] == [
        "My brother Carlos visits me in Porto."]
    assert [f.text for f in extract("My husband Bruno loves football.").facts] == [
        "Rita's husband Bruno loves football."]
    intro = extract("I'm Rita, I live in Lisbon and I work at Acme.")
    assert [f.text for f in intro.facts] == ["Rita lives in Lisbon", "Rita works at Acme."]
    # Not every "and" splits: the second half states no attribute.
    assert len(extract("Sou professora e adoro ler.").facts) == 1
    assert len(extract("My sister and I live in Porto.").facts) == 1


def test_first_person_is_rewritten_to_the_speaker() -> None:
    assert [f.text for f in extract("I live in Lisbon").facts] == ["Rita lives in Lisbon"]
    assert [f.text for f in extract("I no longer live in Boston.").facts] == [
        "Rita no longer lives in Boston."
    ]
    assert [f.text for f in extract("Não moro mais em Lisboa.").facts] == ["Rita não mora mais em Lisboa."]
    assert [f.text for f in extract("I worked at Acme, but now I work at Globex.").facts] == [
        "Rita worked at Acme",
        "Rita now works at Globex.",
    ]
    # A short preamble before a colon is dropped when the clause after it is the speaker's
    assert [f.text for f in extract("Big news: I moved to Porto Alegre last week.").facts] == [
        "Rita moved to Porto Alegre last week."
    ]
    assert [f.text for f in extract("Novidade: eu moro em Lisboa.").facts] == ["Rita mora em Lisboa."]
    assert [f.text for f in extract("Dear diary: my brother visits me in Porto.").facts] == [
        "Dear diary: my brother visits me in Porto."]  # not the speaker's clause: kept as said
    # Only a request to forget is a retraction; a reminder is information.
    [reminder] = extract("Don't forget that I'm allergic to nuts.").facts
    assert reminder.action == "NEW"


@pytest.mark.parametrize("speaker", ["João", "João Silva", None])
@pytest.mark.parametrize("text", ["Eu sou o João", "Eu sou o João.", "Meu nome é João", "Me chamo João!"])
def test_self_introduction_is_never_a_tautology(text: str, speaker: str | None) -> None:
    facts = extract(text, speaker).facts
    if speaker:
        assert facts == []
    else:
        [fact] = facts  # the unnamed speaker's name: kept verbatim, about "user"
        assert (fact.entity, fact.text, fact.attribute_key) == ("user", text, "name")
    for fact in facts:
        assert "João é o João" not in fact.text and "user é" not in fact.text
    assert [f.text for f in extract("Eu sou o João e moro em Lisboa", "João").facts] == [
        "João mora em Lisboa"
    ]


def test_speech_rules_are_deterministic() -> None:
    text = "I live in Lisbon and work at Acme. Forget that I like sushi. Eu sou o João."
    assert extract(text) == extract(text)


# ----- end to end through the write pipeline ---------------------------------------------------


class LogPreRetrieval:
    """TEST DOUBLE of ``PreRetrieval``: known entities from the aggregate (as the real
    fallback), known facts = every active fact, replayed from the agent's real event log."""

    def __init__(self, app: EventLog) -> None:
        self.app = app

    def context(self, agent_id: str, text: str, speaker: str | None, memory: AgentMemory) -> PreRetrievalResult:
        active: dict[str, KnownFact] = {}
        for event in self.app.agent_events(agent_id):
            name = type(event).__qualname__.split(".")[-1]
            if name in ("FactAdded", "FactUpdated"):
                active[event.fact_id] = KnownFact(
                    fact_id=event.fact_id, text=event.text, entity_key=event.entity_key,
                    attribute_key=event.attribute_key,
                )
                if name == "FactUpdated":
                    active.pop(event.supersedes_fact_id, None)
            elif name == "FactRetracted":
                active.pop(event.fact_id, None)
        base = aggregate_context(memory, text, speaker)
        return PreRetrievalResult(entities=base.entities, facts=list(active.values()), source="log")


def fact_state(app: EventLog, agent_id: str) -> tuple[list[str], list[str]]:
    """(active fact texts, inactive fact texts), replayed from the log without cache."""
    active: dict[str, str] = {}
    gone: list[str] = []
    for event in app.agent_events(agent_id):
        name = type(event).__qualname__.split(".")[-1]
        if name in ("FactAdded", "FactUpdated"):
            active[event.fact_id] = event.text
            if name == "FactUpdated":
                gone.append(active.pop(event.supersedes_fact_id))
        elif name == "FactRetracted":
            gone.append(active.pop(event.fact_id))
    return sorted(active.values()), sorted(gone)


def fact_events(app: EventLog, agent_id: str) -> int:
    names = ("FactAdded", "FactUpdated", "FactRetracted")
    return sum(type(e).__qualname__.split(".")[-1] in names for e in app.agent_events(agent_id))


@pytest.fixture
def app(es_env: dict[str, str]) -> Iterator[EventLog]:
    application = EventLog(es_env)
    yield application
    application.close()


@pytest.fixture(params=["aggregate", "log"])
def pipeline(request: pytest.FixtureRequest, app: EventLog) -> WritePipeline:
    pre = LogPreRetrieval(app) if request.param == "log" else None
    return WritePipeline(app, RuleBasedExtractor(), pre_retrieval=pre)  # type: ignore[arg-type]


class Chat:
    def __init__(self, pipeline: WritePipeline, agent_id: str, speaker: str | None = "Rita") -> None:
        self.pipeline, self.agent_id, self.speaker, self.n = pipeline, agent_id, speaker, 0

    def say(self, text: str) -> Any:
        self.n += 1
        result = self.pipeline.write(
            ConversationMessage(agent_id=self.agent_id, message_id=f"m{self.n}", speaker=self.speaker,
                                text=text, occurred_at=WHEN)
        )
        assert result.extraction_error is None and not result.duplicate
        return result


def test_e2e_job_update_leaves_old_job_inactive(pipeline: WritePipeline, app: EventLog, agent_id: str) -> None:
    chat = Chat(pipeline, agent_id)
    chat.say("I work at Acme.")
    result = chat.say("I no longer work at Acme, I now work at Globex.")
    assert [d.kind for d in result.decisions if d.kind in ("ADD", "UPDATE", "DELETE")] == ["UPDATE"]
    assert fact_state(app, agent_id) == (["Rita now works at Globex."], ["Rita works at Acme."])


def test_e2e_forget_retracts_and_stores_nothing(pipeline: WritePipeline, app: EventLog, agent_id: str) -> None:
    chat = Chat(pipeline, agent_id)
    chat.say("I live in Lisbon.")
    chat.say("I like sushi.")
    result = chat.say("Forget that I like sushi")
    assert [d.kind for d in result.decisions if d.kind in ("ADD", "UPDATE", "DELETE")] == ["DELETE"]
    assert fact_state(app, agent_id) == (["Rita lives in Lisbon."], ["Rita likes sushi."])

    # Nothing like it is known: no fact stored, none changed (the request is only recorded).
    before = fact_events(app, agent_id)
    result = chat.say("Please forget that I like olives.")
    assert [d.kind for d in result.decisions if d.kind in ("ADD", "UPDATE", "DELETE")] == []
    assert fact_events(app, agent_id) == before
    assert fact_state(app, agent_id)[0] == ["Rita lives in Lisbon."]


def test_e2e_portuguese_forget(pipeline: WritePipeline, app: EventLog, agent_id: str) -> None:
    chat = Chat(pipeline, agent_id)
    chat.say("Eu gosto de futebol.")
    chat.say("Esquece que eu gosto de futebol")
    assert fact_state(app, agent_id) == ([], ["Rita gosta de futebol."])
    before = fact_events(app, agent_id)
    chat.say("Esquece que eu gosto de novelas.")
    assert fact_events(app, agent_id) == before


def test_e2e_compound_then_move_replaces_only_the_city(
    pipeline: WritePipeline, app: EventLog, agent_id: str
) -> None:
    chat = Chat(pipeline, agent_id)
    first = chat.say("I live in Lisbon and work at Acme.")
    assert [d.kind for d in first.decisions].count("ADD") == 2
    assert fact_state(app, agent_id)[0] == ["Rita lives in Lisbon", "Rita works at Acme."]
    chat.say("I moved to Porto.")
    assert fact_state(app, agent_id) == (
        ["Rita moved to Porto.", "Rita works at Acme."],
        ["Rita lives in Lisbon"],
    )


@pytest.mark.parametrize("speaker", ["João", None])
def test_e2e_self_introduction_stores_no_tautology(
    pipeline: WritePipeline, app: EventLog, agent_id: str, speaker: str | None
) -> None:
    Chat(pipeline, agent_id, speaker).say("Eu sou o João")
    texts = fact_state(app, agent_id)[0]
    assert texts == ([] if speaker else ["Eu sou o João"])
    assert not any(t.startswith(("João é", "user é")) for t in texts)


# ----- bounded LLM output ----------------------------------------------------------------------


def test_every_llm_call_passes_a_max_tokens_sized_from_its_schema() -> None:
    text = "I live in Lisbon and work at Acme."
    cap = extraction_fact_cap(text, 100)
    assert 2 <= cap < 100 and extraction_fact_cap(text, 1) == 1
    llm = ScriptedLLM({text: '{"facts": [], "entities": [], "relationships": []}'}, key_fn=_message_of)
    LLMExtractor(llm).extract(
        ExtractionInput(agent_id="a", message_id="m", speaker="Rita", text=text, occurred_at=WHEN)
    )
    # issue 26: + the emotion and two directives the same answer may carry
    assert llm.calls[0].max_tokens == extraction_max_tokens(cap) == 64 + 24 + 2 * 50 + cap * PER_FACT_TOKENS
    assert f"At most {cap} facts" in llm.calls[0].messages[0]["content"]
    # The runaway seen with a real 1.5B model (3,122 tokens) is far over a short turn's bound.
    assert extraction_max_tokens(extraction_fact_cap("I moved to Porto last year.", 100)) < 1000

    judge = ScriptedLLM(lambda messages: '{"scores": {"1": 1.0, "2": 0.0}}')
    assert rerank(judge, "where does Rita live", ["Rita lives in Lisbon", "Rita likes sushi"], 5).status == "ok"
    assert judge.calls[0].max_tokens == rerank_max_tokens(2)
    assert resolution_max_tokens(["person:ana"]) == 60  # the former fixed bound, for short keys
    assert resolution_max_tokens(["organization:" + "x" * 200]) > 100


def _message_of(messages: Any) -> str:
    user = messages[-1]["content"]
    return str(user.split('Message:\n"""\n', 1)[1].rsplit('\n"""', 1)[0])


def runaway_answer() -> str:
    facts = [
        {"text": f"Rita lives in Lisbon ({i})", "action": "NEW", "target_fact_id": None, "entity": "Rita",
         "mentions": ["Lisbon"], "attribute_key": None, "category": "personal",
         "confidence_level": "explicit_statement"}
        for i in range(200)
    ]
    return json.dumps({"facts": facts, "entities": [], "relationships": []}, indent=2)


def test_truncated_llm_answer_takes_the_fail_safe_path(app: EventLog, agent_id: str) -> None:
    text = "I live in Lisbon."
    cut = runaway_answer()[:1500]  # what a provider returns when it stops at max_tokens
    llm = ScriptedLLM({text: cut}, key_fn=_message_of)
    result = WritePipeline(app, LLMExtractor(llm)).write(
        ConversationMessage(agent_id=agent_id, message_id="m1", speaker="Rita", text=text, occurred_at=WHEN)
    )
    assert result.extraction_error and "malformed JSON" in result.extraction_error
    assert [d.kind for d in result.decisions] == [] and fact_events(app, agent_id) == 0
    record = app.message_record(agent_id, "m1")
    assert record is not None and record.processed and record.text == text  # the message is kept
    processed = list(app.events.get(record.id))[-1]
    assert processed.raw_output == cut and "malformed JSON" in processed.error


def test_openai_finish_reason_length_is_a_recorded_extraction_error(
    app: EventLog, agent_id: str
) -> None:
    text = "I live in Lisbon."
    with run_fake_openai(lambda body: runaway_answer()) as base_url:
        llm = OpenAILLM("fake-model", base_url=base_url, api_key="k", max_retries=0)
        result = WritePipeline(app, LLMExtractor(llm)).write(
            ConversationMessage(agent_id=agent_id, message_id="m1", speaker="Rita", text=text, occurred_at=WHEN)
        )
        sent = base_url.requests[-1]["body"]["max_tokens"]
        assert len(base_url.requests) == 1  # a cut answer is not retried
    assert sent == extraction_max_tokens(extraction_fact_cap(text, 100))
    assert result.extraction_error and "ProviderTruncated" in result.extraction_error
    assert "finish_reason=length" in result.extraction_error
    # the facts finished before the cut are kept, at most the message's fact cap (ADR-0045)
    cap = extraction_fact_cap(text, 100)
    assert f"kept {cap} complete facts of the cut answer" in result.extraction_error
    kept = fact_state(app, agent_id)[0]
    assert kept and set(kept) <= {f"Rita lives in Lisbon ({i})" for i in range(cap)}
    record = app.message_record(agent_id, "m1")
    assert record is not None and record.processed
    processed = list(app.events.get(record.id))[-1]
    assert processed.raw_output == runaway_answer()[: 4 * sent]  # the partial answer is kept
