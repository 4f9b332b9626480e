"""Extractors: the offline rule-based fallback (EN/PT) and the fail-safe LLM extractor.

The LLM is replaced by ``ScriptedLLM`` below: an honest fake implementing the
``LLMProvider`` protocol. It answers from a dict keyed by the message text (found in the
user prompt) and records every call, so tests can inspect the prompt and the
``response_format`` that were sent. No network, no model weights.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from engramdb.domain.extraction import ExtractionInput, KnownEntity, KnownFact
from engramdb.domain.ports import LLMProvider
from engramdb.services.extraction import (
    OFFLINE_NOTICE,
    ExtractionOutcome,
    Extractor,
    LLMExtractor,
    RuleBasedExtractor,
    extraction_json_schema,
)

WHEN = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def request(
    text: str,
    speaker: str | None = "Caroline",
    facts: Sequence[KnownFact] = (),
    entities: Sequence[KnownEntity] = (),
    max_facts: int = 100,
) -> ExtractionInput:
    return ExtractionInput(
        agent_id="agent-1",
        message_id="msg-1",
        speaker=speaker,
        text=text,
        occurred_at=WHEN,
        known_facts=list(facts),
        known_entities=list(entities),
        max_facts=max_facts,
    )


# --------------------------------------------------------------------------- scripted LLM


class ScriptedLLM:
    """Deterministic fake LLM: returns ``script[message_text]`` for the message in the prompt.

    A script value may be a string (returned verbatim) or a callable (called, so a test can
    raise or sleep). An unknown message is an error: the fake never invents answers.
    """

    name = "scripted-test-llm"

    def __init__(self, script: dict[str, str | Callable[[], str]]) -> None:
        self.script = script
        self.calls: list[dict[str, Any]] = []

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        temperature: float = 0,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> str:
        self.calls.append(
            {
                "messages": list(messages),
                "temperature": temperature,
                "response_format": response_format,
            }
        )
        user = messages[-1]["content"]
        for key, answer in self.script.items():
            if f'"""\n{key}\n"""' in user:
                return answer() if callable(answer) else answer
        raise KeyError("ScriptedLLM has no answer scripted for this prompt")


def fact_json(text: str, **overrides: Any) -> dict[str, Any]:
    fact: dict[str, Any] = {
        "text": text,
        "action": "NEW",
        "target_fact_id": None,
        "entity": "Caroline",
        "mentions": [],
        "attribute_key": None,
        "category": "personal",
        "confidence_level": "explicit_statement",
    }
    fact.update(overrides)
    return fact


RESIDENCE = KnownFact(
    fact_id="fact-boston-1",
    text="Caroline lives in Boston",
    entity_key="person:caroline",
    attribute_key="residence",
)
CAROLINE = KnownEntity(
    entity_key="person:caroline", display_name="Caroline", entity_type="person", aliases=["Carol"]
)


# --------------------------------------------------------------------------- rule-based


def facts_of(outcome: ExtractionOutcome) -> list[tuple[str, str, str | None]]:
    return [(f.entity, f.text, f.attribute_key) for f in outcome.extraction.facts]


def test_rule_based_is_labelled_low_quality_and_offline() -> None:
    rb = RuleBasedExtractor()
    assert rb.info.extractor == "rule-based"
    assert rb.info.model is None
    assert "low-quality" in (RuleBasedExtractor.__doc__ or "").lower()
    assert "ENGRAMDB_LLM_API_KEY" in OFFLINE_NOTICE and "\n" not in OFFLINE_NOTICE
    outcome = rb.extract(request("I moved to Porto Alegre last year."))
    assert outcome.llm_calls == 0 and outcome.raw_output is None and outcome.error is None


def test_rule_based_english_residence_and_workplace() -> None:
    out = RuleBasedExtractor().extract(
        request("Hi Mel! I moved to Porto Alegre last year. I work at Vertix as an engineer.")
    )
    assert facts_of(out) == [
        ("Caroline", "Caroline moved to Porto Alegre last year.", "residence"),
        ("Caroline", "Caroline works at Vertix as an engineer.", "workplace"),
    ]
    assert all(f.action == "NEW" and f.confidence == 0.95 for f in out.extraction.facts)
    entities = {(e.name, e.entity_type) for e in out.extraction.entities}
    assert {
        ("Caroline", "person"),
        ("Porto Alegre", "place"),
        ("Vertix", "organization"),
    } <= entities
    rels = {(r.source, r.relation_type, r.target) for r in out.extraction.relationships}
    assert ("Caroline", "lives_in", "Porto Alegre") in rels
    assert ("Caroline", "works_at", "Vertix") in rels
    assert out.extraction.facts[0].mentions == ["Porto Alegre"]


def test_rule_based_portuguese_residence_workplace_job() -> None:
    out = RuleBasedExtractor().extract(
        request(
            "Eu moro em São Paulo. Trabalho na Natura. Sou professora e adoro ler. "
            "Me mudei para o Rio de Janeiro.",
            speaker="Joana",
        )
    )
    assert facts_of(out) == [
        ("Joana", "Joana mora em São Paulo.", "residence"),
        ("Joana", "Joana trabalha na Natura.", "workplace"),
        ("Joana", "Joana é professora e adora ler.", "job_title"),
        ("Joana", "Joana se mudou para o Rio de Janeiro.", "residence"),
    ]
    entities = {(e.name, e.entity_type) for e in out.extraction.entities}
    assert {
        ("São Paulo", "place"),
        ("Natura", "organization"),
        ("Rio de Janeiro", "place"),
    } <= entities


def test_rule_based_relationships_en_and_pt() -> None:
    rb = RuleBasedExtractor()
    en = rb.extract(request("I'm a teacher. My wife Ana loves hiking. Carlos is my brother."))
    assert {(r.source, r.relation_type, r.target) for r in en.extraction.relationships} == {
        ("Caroline", "married_to", "Ana"),
        ("Caroline", "sibling_of", "Carlos"),
    }
    assert [f.attribute_key for f in en.extraction.facts] == ["job_title", None, None]
    assert en.extraction.facts[2].category == "relationship"
    assert en.extraction.facts[2].mentions == ["Carlos"]

    pt = rb.extract(
        request("Minha irmã Ana mora em Lisboa. Meu amigo Pedro adora futebol.", speaker="Joana")
    )
    assert {(r.source, r.relation_type, r.target) for r in pt.extraction.relationships} >= {
        ("Joana", "sibling_of", "Ana"),
        ("Joana", "friend_of", "Pedro"),
        ("Ana", "lives_in", "Lisboa"),
    }
    first = pt.extraction.facts[0]
    assert (first.entity, first.attribute_key) == ("Ana", "residence")
    assert "Joana" in first.mentions and "Lisboa" in first.mentions


@pytest.mark.parametrize(
    ("text", "pet"),
    [
        ("My dog Rex loves the park.", "Rex"),
        ("We adopted a cat named Mia last week.", "Mia"),
        ("Meu cachorro Thor adora correr.", "Thor"),
    ],
)
def test_rule_based_types_a_pet_as_an_animal_not_a_person(text: str, pet: str) -> None:
    """Issue 27: "the dog Rex becomes person:rex". A name after a pet word is an animal's
    (rule-based/v5); a husband after "my husband" stays a person."""
    types = {e.name: e.entity_type for e in RuleBasedExtractor().extract(request(text)).extraction.entities}
    assert types[pet] == "animal"
    husband = RuleBasedExtractor().extract(request("My husband Bruno loves football.")).extraction
    assert {e.name: e.entity_type for e in husband.entities}["Bruno"] == "person"


def test_rule_based_update_of_known_residence_fact() -> None:
    rb = RuleBasedExtractor()
    out = rb.extract(request("I just moved to Lisbon.", facts=[RESIDENCE], entities=[CAROLINE]))
    [fact] = out.extraction.facts
    assert (fact.action, fact.target_fact_id, fact.attribute_key) == (
        "UPDATE",
        "fact-boston-1",
        "residence",
    )
    assert fact.text == "Caroline just moved to Lisbon."

    # Same value again: not an update (reconciliation decides NOOP).
    same = rb.extract(request("I live in Boston with my dog.", facts=[RESIDENCE]))
    assert [(f.action, f.target_fact_id) for f in same.extraction.facts] == [("NEW", None)]

    # Someone else's residence does not update Caroline's.
    other = rb.extract(request("Melanie moved to Lisbon.", facts=[RESIDENCE]))
    assert [(f.entity, f.action) for f in other.extraction.facts] == [("Melanie", "NEW")]


def test_rule_based_retract_only_with_known_fact() -> None:
    rb = RuleBasedExtractor()
    out = rb.extract(request("I no longer live in Boston.", facts=[RESIDENCE]))
    [fact] = out.extraction.facts
    assert (fact.action, fact.target_fact_id) == ("RETRACT", "fact-boston-1")

    unknown = rb.extract(request("I no longer live in Boston."))
    [plain] = unknown.extraction.facts
    # Without a known fact it stays a plain NEW fact, and carries no attribute that could
    # supersede anything.
    assert (plain.action, plain.target_fact_id, plain.attribute_key) == ("NEW", None, None)

    pt_fact = KnownFact(
        fact_id="f-9",
        text="user mora em Lisboa",
        entity_key="person:user",
        attribute_key="residence",
    )
    pt = rb.extract(request("Não moro mais em Lisboa.", speaker=None, facts=[pt_fact]))
    assert [(f.action, f.target_fact_id, f.entity) for f in pt.extraction.facts] == [
        ("RETRACT", "f-9", "user")
    ]


@pytest.mark.parametrize(
    "text",
    [
        "hi",
        "Oi!",
        "Bom dia! Tudo bem com você?",
        "Thanks a lot!",
        "Where do you live these days?",
        "Good morning everyone",
        "Você mora onde?",
        "Ok.",
    ],
)
def test_rule_based_greetings_questions_short_yield_nothing(text: str) -> None:
    out = RuleBasedExtractor().extract(request(text))
    assert out.extraction.facts == [] and out.extraction.relationships == []
    assert out.error is None


def test_rule_based_speaker_self_entity() -> None:
    rb = RuleBasedExtractor()
    anonymous = rb.extract(request("I love hiking in the mountains.", speaker=None))
    [fact] = anonymous.extraction.facts
    assert fact.entity == "user"
    assert fact.text == "I love hiking in the mountains."  # no name to rewrite to
    assert fact.category == "preference"
    named = rb.extract(request("I love hiking in the mountains.", speaker="Melanie"))
    assert [(f.entity, f.text) for f in named.extraction.facts] == [
        ("Melanie", "Melanie loves hiking in the mountains.")
    ]
    assert ("Melanie", "person") in {(e.name, e.entity_type) for e in named.extraction.entities}


def test_rule_based_known_alias_and_third_person() -> None:
    out = RuleBasedExtractor().extract(
        request(
            "Yesterday Melanie went to the beach with Carol.", speaker="Mel", entities=[CAROLINE]
        )
    )
    [fact] = out.extraction.facts
    assert fact.entity == "Melanie" and fact.mentions == ["Caroline"]  # alias → display name
    assert fact.category == "event"


def test_rule_based_is_deterministic_and_capped() -> None:
    text = "I moved to Porto. I work at Vertix. I love jazz. My friend Ana lives in Braga."
    rb = RuleBasedExtractor()
    first = rb.extract(request(text))
    second = rb.extract(request(text))
    assert first.extraction == second.extraction and len(first.extraction.facts) == 4
    capped = rb.extract(request(text, max_facts=2))
    assert len(capped.extraction.facts) == 2


# --------------------------------------------------------------------------- LLM extractor


def valid_answer() -> str:
    return json.dumps(
        {
            "facts": [
                fact_json(
                    "Caroline moved to Lisbon",
                    action="UPDATE",
                    target_fact_id="fact-boston-1",
                    mentions=["Lisbon"],
                    attribute_key="residence",
                ),
                fact_json(
                    "Caroline adopted a cat named Luna",
                    category="personal",
                    mentions=["Luna"],
                    confidence_level="strong_inference",
                ),
            ],
            "entities": [
                {"name": "Caroline", "entity_type": "person"},
                {"name": "Lisbon", "entity_type": "place"},
                {"name": "Luna", "entity_type": "pet"},
            ],
            "relationships": [
                {"source": "Caroline", "target": "Lisbon", "relation_type": "lives_in"}
            ],
        }
    )


def test_llm_extractor_valid_json(tmp_path: Any) -> None:
    msg = "I moved to Lisbon and adopted a cat, Luna!"
    llm = ScriptedLLM({msg: valid_answer()})
    assert isinstance(llm, LLMProvider)
    ex = LLMExtractor(llm, timeout_sec=5)
    extractor: Extractor = ex  # structural protocol
    out = extractor.extract(request(msg, facts=[RESIDENCE], entities=[CAROLINE]))
    assert out.error is None and out.llm_calls == 1 and out.raw_output == valid_answer()
    facts = out.extraction.facts
    assert [(f.action, f.target_fact_id, f.attribute_key) for f in facts] == [
        ("UPDATE", "fact-boston-1", "residence"),
        ("NEW", None, None),
    ]
    assert facts[1].confidence == 0.80
    assert {e.name for e in out.extraction.entities} == {"Caroline", "Lisbon", "Luna"}
    assert out.extraction.relationships[0].relation_type == "lives_in"
    assert out.duration_ms >= 0
    assert llm.calls[0]["temperature"] == 0


def test_llm_extractor_prompt_contents_and_version() -> None:
    msg = "Agora eu moro em Lisboa."
    llm = ScriptedLLM({msg: json.dumps({"facts": [], "entities": [], "relationships": []})})
    ex = LLMExtractor(llm, prompt_version="extraction/v1")
    assert ex.info.extractor == "llm"
    assert ex.info.prompt_version == "extraction/v1"
    assert ex.info.model == "scripted-test-llm"
    # max_facts=2: under the cap a message this short can hold (see llm_budget), so the
    # request's own cap is what the prompt states.
    out = ex.extract(request(msg, facts=[RESIDENCE], entities=[CAROLINE], max_facts=2))
    assert out.error is None and out.extraction.facts == []
    system, user = (m["content"] for m in llm.calls[0]["messages"])
    assert "[fact-boston-1]" in user and "Caroline lives in Boston" in user  # known fact + id
    assert "person:caroline: Caroline; Carol" in user  # known entity with alias
    assert "Speaker: Caroline" in user and "2024-05-01" in user and msg in user
    assert "At most 2 facts" in system and "UPDATE" in system and "RETRACT" in system
    assert "{{" not in system + user


def test_llm_extractor_context_budget() -> None:
    many = [
        KnownFact(fact_id=f"f-{i:03d}", text="x" * 200, entity_key="person:caroline")
        for i in range(60)
    ]
    llm = ScriptedLLM({"hello there friend": '{"facts": [], "entities": [], "relationships": []}'})
    LLMExtractor(llm).extract(request("hello there friend", facts=many))
    user = llm.calls[0]["messages"][-1]["content"]
    shown = [f.fact_id for f in many if f"[{f.fact_id}]" in user]
    assert shown == [f"f-{i:03d}" for i in range(len(shown))]  # most relevant first, no gaps
    assert 5 <= len(shown) < 60
    assert sum(len(f"[{i}] x") + 200 for i in shown) / 4 <= 800 + 50


def test_llm_extractor_sends_strict_json_schema() -> None:
    msg = "I like tea."
    llm = ScriptedLLM({msg: '{"facts": [], "entities": [], "relationships": []}'})
    LLMExtractor(llm).extract(request(msg))
    fmt = llm.calls[0]["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["strict"] is True and fmt["json_schema"]["name"]
    schema = fmt["json_schema"]["schema"]
    assert schema == extraction_json_schema()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node:
                assert node["type"] == "object"
                assert node["additionalProperties"] is False
                assert sorted(node["required"]) == sorted(node["properties"])
            assert not {"default", "minLength", "maxLength", "title"} & set(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    fact_props = schema["$defs"]["ExtractedFact"]["properties"]
    assert "source_message_ids" not in fact_props  # the pipeline sets it, not the model
    assert {"type": "null"} in fact_props["target_fact_id"]["anyOf"]  # nullable, still required
    assert fact_props["action"]["enum"] == ["NEW", "UPDATE", "RETRACT"]


def test_llm_extractor_malformed_json_is_empty_with_error() -> None:
    msg = "I moved to Lisbon."
    out = LLMExtractor(ScriptedLLM({msg: '{"facts": [ {"text": "Caroline'})).extract(request(msg))
    assert out.extraction.facts == [] and out.extraction.entities == []
    assert out.error and "malformed JSON" in out.error
    assert out.raw_output == '{"facts": [ {"text": "Caroline'  # kept for the event log
    assert out.llm_calls == 1

    not_object = LLMExtractor(ScriptedLLM({msg: "[1, 2]"})).extract(request(msg))
    assert not_object.extraction.facts == [] and not_object.error


def test_llm_extractor_accepts_fenced_json() -> None:
    msg = "I like tea."
    answer = "```json\n" + json.dumps({"facts": [fact_json("Caroline likes tea")]}) + "\n```"
    out = LLMExtractor(ScriptedLLM({msg: answer})).extract(request(msg))
    assert [f.text for f in out.extraction.facts] == ["Caroline likes tea"] and out.error is None


def test_llm_extractor_provider_error_is_empty_with_error() -> None:
    def boom() -> str:
        raise ConnectionError("upstream 503")

    msg = "I moved to Lisbon."
    out = LLMExtractor(ScriptedLLM({msg: boom})).extract(request(msg))
    assert out.extraction.facts == [] and out.raw_output is None
    assert out.error and "ConnectionError" in out.error and "upstream 503" in out.error


def test_llm_extractor_timeout_even_if_provider_ignores_it() -> None:
    def slow() -> str:
        time.sleep(3.0)
        return '{"facts": [], "entities": [], "relationships": []}'

    msg = "I moved to Lisbon."
    started = time.perf_counter()
    out = LLMExtractor(ScriptedLLM({msg: slow}), timeout_sec=0.3).extract(request(msg))
    elapsed = time.perf_counter() - started
    assert elapsed < 1.5
    assert out.extraction.facts == [] and out.error and "timed out" in out.error
    assert out.llm_calls == 1 and 250 <= out.duration_ms < 1500


def test_llm_extractor_partially_invalid_facts_keep_valid_ones() -> None:
    msg = "I moved to Lisbon and I love jazz."
    answer = json.dumps(
        {
            "facts": [
                fact_json("Caroline moved to Lisbon", attribute_key="residence"),
                fact_json("", category="personal"),  # empty text: invalid
                fact_json("Caroline loves jazz", action="MERGE"),  # unknown action: invalid
                fact_json("Caroline loves jazz", category=None, mentions=None),  # nulls → defaults
                "not an object",
            ],
            "entities": [{"name": "Lisbon", "entity_type": "place"}, {"entity_type": "place"}],
            "relationships": [],
        }
    )
    out = LLMExtractor(ScriptedLLM({msg: answer})).extract(request(msg))
    assert [f.text for f in out.extraction.facts] == [
        "Caroline moved to Lisbon",
        "Caroline loves jazz",
    ]
    assert out.extraction.facts[1].category == "general" and out.extraction.facts[1].mentions == []
    assert [e.name for e in out.extraction.entities] == ["Lisbon"]
    assert out.error is not None
    for part in ("facts[1]", "facts[2]", "facts[4]", "entities[1]"):
        assert part in out.error


def test_llm_extractor_caps_max_facts() -> None:
    msg = "A long story about many things that happened."
    answer = json.dumps({"facts": [fact_json(f"fact number {i}") for i in range(10)]})
    out = LLMExtractor(ScriptedLLM({msg: answer})).extract(request(msg, max_facts=3))
    assert [f.text for f in out.extraction.facts] == [
        "fact number 0",
        "fact number 1",
        "fact number 2",
    ]
    assert out.error and "max_facts=3" in out.error


def test_llm_extractor_passes_unknown_target_ids_through() -> None:
    msg = "I moved to Lisbon."
    answer = json.dumps(
        {
            "facts": [
                fact_json(
                    "Caroline moved to Lisbon", action="UPDATE", target_fact_id="no-such-fact"
                )
            ]
        }
    )
    out = LLMExtractor(ScriptedLLM({msg: answer})).extract(request(msg, facts=[RESIDENCE]))
    # The aggregate, not the extractor, rejects (and records) an unknown target id.
    assert [(f.action, f.target_fact_id) for f in out.extraction.facts] == [
        ("UPDATE", "no-such-fact")
    ]
    assert out.error is None


def test_missing_prompt_version_fails_fast() -> None:
    with pytest.raises(FileNotFoundError):
        LLMExtractor(ScriptedLLM({}), prompt_version="extraction/v999")
