"""Repairs of an LLM extraction after parsing (issue 26, ADR-0045).

Why: with a real 1.5B model the LLM path's facts ranked worse than the rule-based
extractor's. Part of it is the model's, part is ours: three mistakes of a small model made
memory *lose* facts, and each is cheap to repair after parsing — so a replayed (recorded)
answer benefits from the repair without a new LLM call.

* **Free attribute keys.** ``attribute_key`` means "single-valued: a newer value replaces
  the older one". A model that writes ``hobby`` or ``event`` there makes every new hobby
  supersede the last one. Only the closed list the prompt names is kept (folded to
  snake_case; a few synonyms mapped), and only when the fact's text says something such an
  attribute is stated with (EN + PT cue words: "lives", "moved", "mora" for residence…);
  anything else becomes null. On the LoCoMo slice the 1.5B model tagged thanks and
  compliments ``hometown``, and each superseded the one before.
* **UPDATEs of unrelated facts.** An UPDATE supersedes its target. One whose target is a
  known fact shown to the model is kept only when both name the same single-valued
  attribute; otherwise it becomes a NEW (a duplicate beats a lost fact, as in
  reconciliation). A target the model was not shown is left to the aggregate, which
  rejects and records it and adds the statement.
* **First person.** "I", "me", "user" as a fact's subject, or a fact text starting "I …" /
  "My …", when the speaker's name is known: the name is written in, as the prompt asks,
  so the fact is self-contained (and carries the name the questions use).
* **Copied context.** The known-facts context shows lines like ``[f_…] (person:melanie) …``;
  the 1.5B model copied the key as a name (``"entity": "person:melanie"``, which became the
  entity ``person:person-melanie``) and the whole line as a target id (so a correct UPDATE
  was rejected as "not an active fact" and added as a duplicate). A name shaped
  ``<entity type>:<slug>`` is read back as the slug's name, and a target that holds exactly
  one shown fact id is that id.
* **Missed directives and emotion** (issue 26). A 1.5B model misses most directives; when it
  gives none, the offline rules' directives (``rule_based.directives``, the user's words) are
  used, and a fact that merely restates one is dropped. An answer without an emotion gets the
  offline lexicon's, labelled ``detector="lexicon"``.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from engramdb.domain.directives import ExtractedDirective
from engramdb.domain.emotion import ExtractedEmotion
from engramdb.domain.extraction import ExtractedFact, Extraction, ExtractionInput
from engramdb.domain.text import match_key as fold
from engramdb.services.extraction.rule_based.directives import directive_in
from engramdb.services.extraction.rule_based.emotion import lexicon_emotion
from engramdb.services.extraction.rule_based.patterns import SENTENCE_SPLIT

SINGLE_VALUED = frozenset(
    {"residence", "workplace", "job_title", "age", "relationship_status", "hometown",
     "nationality", "school", "birthday"}
)
_SYNONYMS = {
    "location": "residence", "city": "residence", "home": "residence", "address": "residence",
    "lives_in": "residence", "employer": "workplace", "company": "workplace", "job": "job_title",
    "occupation": "job_title", "profession": "job_title", "role": "job_title",
    "marital_status": "relationship_status", "birth_date": "birthday", "date_of_birth": "birthday",
    "university": "school", "college": "school",
}
_SELF = frozenset({"i", "me", "my", "myself", "user", "speaker", "the user", "the speaker", "eu"})
_SLUG = re.compile(r"[^a-z0-9]+")
_LEADING_I = re.compile(r"^(I['’]m|I['’]ve|I['’]d|I['’]ll|I|My)(?![\w'’])\s*", re.IGNORECASE)
# Words a statement of each single-valued attribute uses (EN + PT). Measured on the LoCoMo
# slice: the 1.5B model put ``hometown`` or ``relationship_status`` on thanks, compliments and
# paintings, and each such fact superseded the previous one of "the same attribute".
_CUES: dict[str, re.Pattern[str]] = {name: re.compile(rf"\b(?:{words})", re.IGNORECASE) for name, words in {
    "residence": r"liv(?:e|es|ed|ing)|moved?|moving|home|house|apartment|flat|city|reside|"
                 r"mor[oaei]|mudou|mudei|casa|cidade",
    "workplace": r"work|job|employ|compan|office|hired|joined|trabalh|empresa|emprego",
    "job_title": r"work(?:s|ed|ing)? as|job|position|role|title|career|profession|"
                 r"engineer|teacher|nurse|doctor|developer|manager|counsel|"
                 r"trabalh\w* como|cargo|profiss",
    "age": r"\d+\s*(?:years?|yo)|years old|age|aged|birthday|anos",
    "relationship_status": r"married|single|divorc|engaged|widow|partner|boyfriend|girlfriend|"
                           r"husband|wife|dating|relationship|casad|solteir|noiv|namor|"
                           r"marido|esposa|divorci",
    "hometown": r"from|grew up|born|hometown|raised|native|nasc|cresc|natural de|sou de",
    "nationality": r"nationality|citizen|passport|\w+(?:ian|ese|ish|can)\b|nacionalidade|"
                   r"brasileir|portugues|cidadã",
    "school": r"school|universit|college|stud(?:y|ies|ied|ent)|class|degree|graduat|"
              r"escola|faculdade|universidade|estud|curso",
    "birthday": r"birthday|born|aniversário|nasci",
}.items()}


def attribute(key: str | None, text: str | None = None) -> str | None:
    """The closed-list attribute ``key`` names, or None — also None when ``text`` is given
    and says nothing an attribute of that name is stated with (``_CUES``)."""
    if not key:
        return None
    slug = _SLUG.sub("_", key.strip().lower()).strip("_")
    slug = _SYNONYMS.get(slug, slug)
    if slug not in SINGLE_VALUED:
        return None
    if text is not None and not _CUES[slug].search(text):
        return None
    return slug


def parse_emotion(value: Any, problems: list[str]) -> ExtractedEmotion | None:
    """The answer's ``emotion`` object (the model never sets ``detector``: always ``llm``)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        problems.append("'emotion' is not an object")
        return None
    try:
        return ExtractedEmotion.model_validate(
            {k: v for k, v in value.items() if k in ("primary", "intensity")} | {"detector": "llm"}
        )
    except ValidationError as exc:
        problems.append(f"dropped emotion: {exc.errors()[0]['msg']}")
        return None


_KEY_SHAPED = re.compile(r"^\s*([a-z_]{2,40}):([a-z0-9][a-z0-9-]*)\s*$")
_FACT_ID = re.compile(r"\bf_[0-9a-f]{20}\b")
_ENTITY_TYPES = frozenset({"person", "place", "organization", "thing", "event", "animal",
                           "pet", "object", "location", "group", "self"})


def _name(value: str, types: frozenset[str]) -> str:
    """``person:melanie`` (a key the model copied from the context) → ``melanie``."""
    match = _KEY_SHAPED.match(value)
    if match is None or match.group(1) not in types:
        return value
    return match.group(2).replace("-", " ")


def _target(target: str | None, known: dict[str, str | None]) -> str | None:
    """A target the model copied with its context line: the one shown fact id inside it."""
    if target is None or target in known:
        return target
    ids = {i for i in _FACT_ID.findall(target) if i in known}
    return ids.pop() if len(ids) == 1 else target


def _first_person(text: str, speaker: str) -> str:
    match = _LEADING_I.match(text)
    if not match:
        return text
    word = match.group(1).lower()
    rest = text[match.end():]
    if word == "my":
        return f"{speaker}'s {rest}"
    verb = {"i'm": "is ", "i've": "has ", "i'd": "would ", "i'll": "will "}.get(word, "")
    if not verb:
        head, _, tail = rest.partition(" ")
        third = {"am": "is", "have": "has", "was": "was", "do": "does"}.get(head.lower())
        if third:
            rest = f"{third} {tail}"
    return f"{speaker} {verb}{rest}"


def _repair_fact(
    fact: ExtractedFact, known: dict[str, str | None], speaker: str | None, notes: list[str],
    types: frozenset[str] = _ENTITY_TYPES,
) -> ExtractedFact:
    update: dict[str, Any] = {}
    entity, mentions = _name(fact.entity, types), [_name(m, types) for m in fact.mentions]
    if entity != fact.entity or mentions != fact.mentions:
        update.update(entity=entity, mentions=mentions)
        fact = fact.model_copy(update=update)
    target = _target(fact.target_fact_id, known)
    if target != fact.target_fact_id:
        notes.append(f"target {fact.target_fact_id!r:.60} read as {target!r}")
        update["target_fact_id"] = target
        fact = fact.model_copy(update=update)
    key = attribute(fact.attribute_key, fact.text)
    if key != fact.attribute_key:
        update["attribute_key"] = key
    if fact.action == "UPDATE" and fact.target_fact_id in known:
        target = fact.target_fact_id
        if key is None or known.get(target) != key:
            update.update(action="NEW", target_fact_id=None)
            notes.append(f"UPDATE of {target!r} kept as NEW (not the same single-valued attribute)")
    if speaker:
        if fold(fact.entity) in _SELF:
            update["entity"] = speaker
        text = _first_person(fact.text, speaker)
        if text != fact.text:
            update["text"] = text
    return fact.model_copy(update=update) if update else fact


def _backstop_directives(
    extraction: Extraction, text: str, problems: list[str]
) -> tuple[list[ExtractedDirective], set[str]]:
    """The model's directives, or — when it gave none — the sentences the offline rules
    read as directives (in the user's words), with the folded sentences they came from."""
    if extraction.directives:
        return list(extraction.directives), set()
    found: list[ExtractedDirective] = []
    sentences: set[str] = set()
    for sentence in SENTENCE_SPLIT.split(text.strip()):
        directive = directive_in(" ".join(sentence.split()))
        if directive is not None:
            found.append(directive)
            sentences.add(fold(directive.text).rstrip(".!"))
    if found:
        problems.append(f"{len(found)} directive(s) the model missed read by the offline rules")
    return found, sentences


def postprocess(extraction: Extraction, request: ExtractionInput, problems: list[str]) -> Extraction:
    """``extraction`` with the repairs above applied; notes appended to ``problems``."""
    known = {f.fact_id: attribute(f.attribute_key) for f in request.known_facts}
    types = _ENTITY_TYPES | {f.entity_key.partition(":")[0] for f in request.known_facts}
    speaker = (request.speaker or "").strip() or None
    facts = [_repair_fact(f, known, speaker, problems, types) for f in extraction.facts]
    directives, sentences = _backstop_directives(extraction, request.text, problems)
    directive_texts = {fold(d.text) for d in directives}

    def restates_a_directive(fact: ExtractedFact) -> bool:
        folded = fold(fact.text).rstrip(".!")
        return fold(fact.text) in directive_texts or any(s and s in folded for s in sentences)

    kept = [f for f in facts if not restates_a_directive(f)]
    # an answer without an emotion gets the lexicon's, labelled detector="lexicon"
    emotion = extraction.emotion if extraction.emotion is not None else lexicon_emotion(request.text)
    entities = [e.model_copy(update={"name": _name(e.name, types)}) for e in extraction.entities]
    if speaker:
        entities = [e.model_copy(update={"name": speaker}) if fold(e.name) in _SELF else e
                    for e in entities]
    relationships = [r.model_copy(update={"source": _name(r.source, types), "target": _name(r.target, types)})
                     for r in extraction.relationships]
    if speaker:
        relationships = [
            r.model_copy(update={
                "source": speaker if fold(r.source) in _SELF else r.source,
                "target": speaker if fold(r.target) in _SELF else r.target,
            })
            for r in relationships
        ]
    return extraction.model_copy(update={
        "facts": kept, "entities": entities, "relationships": relationships,
        "directives": directives, "emotion": emotion,
    })
