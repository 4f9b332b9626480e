"""Directives and emotion through both extractors, without servers (issue 26, ADR-0045).

The LLM is the scripted test double (it answers what the test wrote, as a real model's JSON
would look); the rule-based extractor and the lexicon are the real offline code.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bench.shared.llm_cassette import CassetteLLM, NotRecorded
from engramdb.domain.directive_facts import with_directive_facts
from engramdb.domain.directives import ExtractedDirective, topic_key
from engramdb.domain.extraction import ExtractionInput, KnownFact
from engramdb.infra.providers.scripted import ScriptedLLM
from engramdb.services.extraction.llm_extractor import LLMExtractor, extraction_json_schema
from engramdb.services.extraction.rule_based import RuleBasedExtractor
from engramdb.services.extraction.rule_based.directives import directive_in
from engramdb.services.extraction.rule_based.emotion import lexicon_emotion
from engramdb.services.retrieve.directive_section import section
from engramdb.services.retrieve.models import Directive

WHEN = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def request(text: str, speaker: str | None = "Ana", facts: Sequence[KnownFact] = ()) -> ExtractionInput:
    return ExtractionInput(agent_id="a", message_id="m1", speaker=speaker, text=text,
                           occurred_at=WHEN, known_facts=list(facts))


def message_key(messages: Sequence[dict[str, Any]]) -> str:
    user = messages[-1]["content"]
    return user.split('Message:\n"""\n', 1)[1].rsplit('\n"""', 1)[0]


def llm_extract(text: str, answer: dict[str, Any], **kw: Any) -> Any:
    llm = ScriptedLLM({text: json.dumps(answer)}, key_fn=message_key)
    return LLMExtractor(llm).extract(request(text, **kw))


# ----- offline: the rules and the lexicon -------------------------------------------------

@pytest.mark.parametrize(("sentence", "topic"), [
    ("Always answer in Portuguese.", "language"),
    ("Never suggest meetings before 9 am.", "scheduling"),
    ("From now on, keep your answers short.", "answer_length"),
    ("Please stop calling me sir.", "form_of_address"),
    ("Don't use emojis.", "emojis"),
    ("Prefiro que você seja direto.", "tone"),
    ("Sempre responda em português.", "language"),
    ("Nunca marque reuniões antes das 9h.", "scheduling"),
    ("A partir de agora, respostas curtas.", "answer_length"),
    ("Pare de me chamar de senhor.", "form_of_address"),
    ("Actually, long answers are fine.", "answer_length"),
    ("Na verdade, respostas longas estão ok.", "answer_length"),
])
def test_offline_rules_read_directives_en_pt(sentence: str, topic: str) -> None:
    found = directive_in(sentence)
    assert found is not None and found.topic == topic
    assert found.text == sentence  # the user's own words on the offline path


@pytest.mark.parametrize("sentence", [
    "Don't worry about it!", "I always go running on Sundays.", "Never been to Paris.",
    "Nunca pensei nisso.", "Should I always answer?", "I went to a support group yesterday.",
    "Actually, I moved to Porto.", "Don't forget that I'm allergic to nuts.",
    "Não esqueça que eu sou alérgico a nozes.",
])
def test_offline_rules_leave_statements_and_small_talk_alone(sentence: str) -> None:
    assert directive_in(sentence) is None


def test_an_unknown_topic_is_its_own_so_unrelated_directives_coexist() -> None:
    a, b = directive_in("Always greet me with a joke."), directive_in("Never mention the weather.")
    assert a is not None and b is not None and topic_key(a.topic) != topic_key(b.topic)


def test_rule_based_extractor_gives_directives_not_facts_and_a_lexicon_emotion() -> None:
    out = RuleBasedExtractor().extract(request("I live in Recife. From now on, keep your answers short!"))
    assert [d.text for d in out.extraction.directives] == ["From now on, keep your answers short!"]
    assert [f.text for f in out.extraction.facts] == ["Ana lives in Recife."]
    assert out.extraction.emotion is None  # no emotion word: nothing recorded, never a guess
    sad = RuleBasedExtractor().extract(request("Estou muito triste hoje.")).extraction.emotion
    assert sad is not None and (sad.primary, sad.detector) == ("sadness", "lexicon")


@pytest.mark.parametrize(("text", "label"), [
    ("I am so happy and excited!", "joy"), ("Estou com medo da prova.", "fear"),
    ("That made me really angry.", "anger"), ("Que nojo!", "disgust"),
])
def test_lexicon_emotion_en_pt(text: str, label: str) -> None:
    emotion = lexicon_emotion(text)
    assert emotion is not None and emotion.primary == label and emotion.detector == "lexicon"


# ----- LLM path: the one call carries emotion and directives -----------------------------

def test_schema_asks_emotion_and_directives_but_not_who_detected() -> None:
    schema = extraction_json_schema()
    assert list(schema["properties"])[:2] == ["emotion", "directives"]
    assert "detector" not in json.dumps(schema)


def test_llm_answer_with_emotion_and_english_directive() -> None:
    text = "A partir de agora, responda sempre em português. Estou feliz!"
    out = llm_extract(text, {
        "emotion": {"primary": "joy", "intensity": "high"},
        "directives": [{"text": "Answer in Portuguese.", "topic": "language"}],
        "facts": [], "entities": [], "relationships": [],
    })
    assert out.error is None and out.llm_calls == 1
    assert [(d.text, d.topic) for d in out.extraction.directives] == [("Answer in Portuguese.", "language")]
    emo = out.extraction.emotion
    assert emo is not None and (emo.primary, emo.intensity, emo.detector) == ("joy", "high", "llm")


def test_llm_missed_directive_is_caught_by_the_rules_and_not_kept_as_a_fact() -> None:
    text = "From now on, keep your answers short."
    out = llm_extract(text, {
        "emotion": None, "directives": [],
        "facts": [{"text": text, "entity": "Ana", "category": "general"}],
    })
    assert [d.text for d in out.extraction.directives] == [text]
    assert out.extraction.facts == []
    assert out.error is not None and "offline rules" in out.error


def test_llm_without_emotion_gets_the_lexicon_labelled_so() -> None:
    out = llm_extract("I am so sad today.", {"facts": [{"text": "Ana is sad", "entity": "Ana"}]})
    assert out.extraction.emotion is not None and out.extraction.emotion.detector == "lexicon"


def test_llm_fact_repairs_attribute_first_person_and_unrelated_update() -> None:
    known = KnownFact(fact_id="f-hike", text="Ana likes hiking", entity_key="person:ana")
    out = llm_extract("I started painting. I moved to Lisbon.", {"facts": [
        {"text": "I started painting", "entity": "I", "attribute_key": "hobby",
         "action": "UPDATE", "target_fact_id": "f-hike"},
        {"text": "Ana moved to Lisbon", "entity": "Ana", "attribute_key": "City"},
    ]}, facts=[known])
    painting, lisbon = out.extraction.facts
    assert (painting.text, painting.entity, painting.attribute_key) == ("Ana started painting", "Ana", None)
    assert (painting.action, painting.target_fact_id) == ("NEW", None)  # hobbies coexist
    assert lisbon.attribute_key == "residence"


# ----- directives become facts of their own category -------------------------------------

def test_directives_become_directive_facts_of_the_speaker() -> None:
    extraction = RuleBasedExtractor().extract(request("Sempre responda em português.")).extraction
    decided = with_directive_facts(extraction, "Ana")
    (fact,) = decided.facts
    assert (fact.category, fact.attribute_key, fact.entity) == ("directive", "directive:language", "Ana")
    assert "Ana" in [e.name for e in decided.entities]
    assert with_directive_facts(extraction, None).facts[0].entity == "user"


def test_section_always_shows_the_first_directive_and_whole_lines_only() -> None:
    ds = [Directive(fact_id=f"f{i}", text=f"Directive number {i} " + "x" * 60) for i in range(5)]
    text, shown = section(ds, budget=30)
    assert text.startswith("Directives:\n- Directive number 0") and shown == 1
    text, shown = section(ds, budget=1000)
    assert shown == 5 and text.count("\n- ") == 5
    assert section([], 100) == ("", 0)
    assert ExtractedDirective(text="Answer in Portuguese.", topic="Language Choice").topic


# ----- the cassette: record once, replay without a model ---------------------------------

def test_cassette_records_replays_and_resumes(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    inner = ScriptedLLM({"hello": '{"ok": 1}', "again": '{"ok": 2}'})
    rec = CassetteLLM(path, "record", inner)
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}]
    assert rec.complete(msgs) == '{"ok": 1}' and len(inner.calls) == 1
    resumed = CassetteLLM(path, "record", inner)
    assert resumed.complete(msgs) == '{"ok": 1}' and len(inner.calls) == 1 and resumed.resumed == 1
    replay = CassetteLLM(path, "replay")
    assert replay.complete(msgs) == '{"ok": 1}'
    with pytest.raises(NotRecorded):
        replay.complete([{"role": "user", "content": "again"}])
    assert replay.misses == 1


class _CutOnce:
    """A provider whose first answer is cut (``partial_output``), as a runaway model's is."""

    name = "cut-once"

    def __init__(self, partial: str, answer: str) -> None:
        self.partial, self.answer, self.calls = partial, answer, 0

    def complete(self, messages: Any, temperature: float = 0, response_format: Any = None,
                 max_tokens: int | None = None) -> str:
        self.calls += 1
        if self.calls == 1:
            from engramdb.infra.providers.errors import ProviderTruncated

            raise ProviderTruncated("answer cut at max_tokens=9 (finish_reason=length)", self.partial)
        return self.answer


def test_cassette_keeps_a_cut_answer_and_a_resumed_answer_supersedes_it(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    msgs = [{"role": "user", "content": "hello"}]
    inner = _CutOnce('{"facts": [{"text": "a"}, {"te', '{"facts": []}')
    with pytest.raises(Exception, match="finish_reason=length"):
        CassetteLLM(path, "record", inner).complete(msgs)
    with pytest.raises(Exception) as cut:
        CassetteLLM(path, "replay").complete(msgs)
    assert getattr(cut.value, "partial_output", None) == '{"facts": [{"text": "a"}, {"te'
    assert CassetteLLM(path, "record", inner).complete(msgs) == '{"facts": []}'  # asked again
    assert CassetteLLM(path, "replay").complete(msgs) == '{"facts": []}'  # the new answer wins


def test_llm_extractor_keeps_the_facts_a_cut_answer_finished() -> None:
    fact = {"text": "Rita lives in Lisbon", "action": "NEW", "target_fact_id": None,
            "entity": "Rita", "mentions": ["Lisbon"], "attribute_key": None,
            "category": "personal", "confidence_level": "explicit_statement"}
    partial = json.dumps({"emotion": None, "directives": [], "facts": [fact, fact]})[:-40]
    extractor = LLMExtractor(_CutOnce(partial, "{}"))  # type: ignore[arg-type]
    outcome = extractor.extract(ExtractionInput(
        agent_id="a", message_id="m", speaker="Rita", text="I live in Lisbon, near the river.",
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC)))
    assert [f.text for f in outcome.extraction.facts] == ["Rita lives in Lisbon"]
    assert outcome.error and "ProviderTruncated" in outcome.error and "kept 1 complete" in outcome.error
    assert outcome.raw_output == partial and not outcome.transient


@pytest.mark.parametrize("sentence", ["Keep it up!", "Keep it up, you're making a big impact!"])
def test_encouragement_is_not_a_directive(sentence: str) -> None:
    """Seen on LoCoMo (two friends talking): "keep it up" is not an instruction to the agent."""
    assert directive_in(sentence) is None


def test_llm_attribute_needs_a_cue_in_the_fact_and_i_am_is_rewritten() -> None:
    """Seen on LoCoMo with the 1.5B model: ``hometown`` on a compliment superseded the last
    "hometown" fact; "I'm glad" became "Melanie 'm glad"."""
    out = llm_extract("Yes, this is my own painting. I'm glad you like it.", {"facts": [
        {"text": "Yes, this is my own painting.", "entity": "Ana", "attribute_key": "hometown"},
        {"text": "I'm glad you like it", "entity": "Ana", "attribute_key": None},
        {"text": "Ana is from Recife", "entity": "Ana", "attribute_key": "hometown"},
    ]})
    painting, glad, origin = out.extraction.facts
    assert painting.attribute_key is None and origin.attribute_key == "hometown"
    assert glad.text == "Ana is glad you like it"


def test_llm_copied_context_is_read_back_as_names_and_ids() -> None:
    """Seen on LoCoMo with the 1.5B model: ``"entity": "person:melanie"`` became the entity
    ``person:person-melanie``, and a target id copied with its whole context line made a
    correct UPDATE a rejected one (and a duplicate fact)."""
    fid = "f_" + "ab12" * 5
    known = KnownFact(fact_id=fid, text="Melanie lives in Boston", entity_key="person:melanie",
                      attribute_key="residence")
    out = llm_extract("I moved to Denver.", {"facts": [
        {"text": "Melanie moved to Denver", "entity": "person:melanie", "mentions": ["place:denver"],
         "attribute_key": "residence", "action": "UPDATE",
         "target_fact_id": f"[{fid}] (person:melanie; residence) Melanie lives in Boston"},
        {"text": "Ratio: 3:1 is fine", "entity": "ratio:3", "mentions": []},
    ], "entities": [{"name": "person:melanie", "entity_type": "person"}],
       "relationships": [{"source": "person:melanie", "target": "place:denver", "relation_type": "lives_in"}]},
        speaker="Melanie", facts=[known])
    moved, ratio = out.extraction.facts
    assert moved.entity == "melanie" and moved.mentions == ["denver"]
    assert moved.action == "UPDATE" and moved.target_fact_id == fid
    assert ratio.entity == "ratio:3"  # not an entity type: a name with a colon stays as it is
    assert out.extraction.entities[0].name == "melanie"
    rel = out.extraction.relationships[0]
    assert (rel.source, rel.target) == ("melanie", "denver")
