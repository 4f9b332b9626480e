"""The rule-based extractor itself: the per-sentence decisions (who a sentence is about,
which attribute it states, whether it updates or retracts a known fact) and the fact built.

Why its own module: this is the only stateful, order-dependent part of the fallback; the
vocabularies (:mod:`.lexicon`), regexes (:mod:`.patterns`), string grammar (:mod:`.grammar`)
and look-ups in what memory knows (:mod:`.known`) are kept out so this logic reads on its
own. What the extractor can and cannot do is in the package docstring.
"""

from __future__ import annotations

import re
import time

from engramdb.domain.directives import ExtractedDirective
from engramdb.domain.extraction import (
    ConfidenceLevel,
    ExtractedFact,
    Extraction,
    ExtractionInput,
    ExtractorInfo,
    KnownEntity,
)
from engramdb.domain.text import (
    NAME_WORD_PATTERN,
    NAME_WORD_RE,
    fold_case,
    is_greeting_sentence,
)
from engramdb.services.extraction.port import ExtractionOutcome
from engramdb.services.extraction.rule_based.clauses import split_clauses
from engramdb.services.extraction.rule_based.collected import (
    Claim,
    Collected,
    mentions_of,
    relate_people,
)
from engramdb.services.extraction.rule_based.directives import directive_in
from engramdb.services.extraction.rule_based.emotion import lexicon_emotion
from engramdb.services.extraction.rule_based.grammar import (
    job_title,
    leading_name,
    name_the_possessor,
    rewrite_first_person,
)
from engramdb.services.extraction.rule_based.known import (
    canonical_name,
    known_attribute_fact,
    known_forms,
    known_type,
)
from engramdb.services.extraction.rule_based.names import names_in, type_of
from engramdb.services.extraction.rule_based.negations import merge_negations
from engramdb.services.extraction.rule_based.patterns import (
    ATTRIBUTE_PATTERNS,
    CATEGORY_HINTS,
    FIRST_PERSON,
    FIRST_PERSON_I,
    NEGATIONS,
    SENTENCE_SPLIT,
    AttributePattern,
)
from engramdb.services.extraction.rule_based.speech_acts import (
    matching_known_fact,
    retraction_request,
    same_person,
    self_introduction,
)

OFFLINE_NOTICE = (
    "engramdb: no LLM configured — using the low-quality rule-based extractor "
    "(set ENGRAMDB_LLM_API_KEY, and optionally ENGRAMDB_LLM_BASE_URL/ENGRAMDB_LLM_MODEL, "
    "to extract facts with an LLM)"
)
# Recorded as the facts' provenance (like an LLM prompt version). v2 (issue 9): clauses,
# retraction requests, self-introductions, negation + new value as one UPDATE. v3: "My brother
# Carlos…" → "Rita's brother Carlos…" (the possessor named). v4: a short preamble before a
# colon ("Big news: I moved to…") is dropped when the clause after it is the speaker's. v5: a
# name after a pet word ("my dog Rex", "a cat named Mia", "meu cachorro Thor") is an animal.
# v6 (issue 26): directives ("always…", "nunca…") are not facts but directives; the
# message's emotion from a small lexicon (``detector="lexicon"``).
RULES_VERSION = "rule-based/v6"
SELF_FALLBACK = "user"


def speaker_named(sentence: str, speaker: str | None, about_the_speaker: bool) -> str:
    """The fact's text with the speaker's first person replaced by their name: as the subject
    when the fact is about the speaker ("I live…"), and as the possessor of a leading "my"
    ("My husband Bruno loves…", a fact about the speaker's family or about Bruno)."""
    text = rewrite_first_person(sentence, speaker) if about_the_speaker else sentence
    return name_the_possessor(text, speaker)


class RuleBasedExtractor:
    """Low-quality, deterministic, offline EN/PT fallback extractor (no LLM).

    Use only when no LLM is configured; see the package docstring for what it can and
    cannot do. ``info.extractor == "rule-based"`` marks its facts for later re-extraction.
    """

    def __init__(self) -> None:
        self.info = ExtractorInfo(extractor="rule-based", model=None, prompt_version=RULES_VERSION)

    # -- public --------------------------------------------------------------------------

    def extract(self, request: ExtractionInput) -> ExtractionOutcome:
        started = time.perf_counter()
        try:
            extraction = self._extract(request)
            error = None
        except Exception as exc:  # noqa: BLE001 — fail-safe: never crash the caller
            extraction, error = Extraction(), f"rule-based extraction failed: {exc!r}"
        return ExtractionOutcome(
            extraction=extraction,
            llm_calls=0,
            error=error,
            raw_output=None,
            duration_ms=(time.perf_counter() - started) * 1000.0,
        )

    # -- internals -----------------------------------------------------------------------

    def _extract(self, request: ExtractionInput) -> Extraction:
        self_name = (request.speaker or "").strip() or SELF_FALLBACK
        out = Collected()
        directives: list[ExtractedDirective] = []  # ADR-0045
        forms = known_forms(request.known_entities)
        for raw_sentence in SENTENCE_SPLIT.split(request.text.strip()):
            sentence = " ".join(raw_sentence.split()).strip(" \"'“”‘’-–—")
            if not sentence:
                continue
            directive = directive_in(sentence)
            if directive is not None:
                # An instruction to the agent, not a fact about anyone (ADR-0045).
                directives.append(directive)
                continue
            statement = retraction_request(sentence)
            if statement is not None:
                # An act, not a statement: it retracts, it is never stored as a fact.
                for retraction in self._retractions(statement, request, self_name, forms, out):
                    out.add(retraction, "")
                continue
            for clause in split_clauses(sentence):
                intro = self_introduction(clause)
                if intro is not None and same_person(intro[0], self_name):
                    continue  # "Eu sou o João" said by João: nothing new, and no tautology
                if intro is not None and intro[1]:
                    out.add(self._introduction(clause, self_name, out), clause)
                    continue
                fact = self._sentence_fact(clause, request, self_name, forms, out)
                if fact is not None:
                    out.add(fact, clause)
        facts = merge_negations(out.facts, out.sources)
        return Extraction(
            emotion=lexicon_emotion(request.text),
            directives=directives,
            facts=facts[: max(request.max_facts, 0)],
            entities=list(out.entities.values()),
            relationships=list(out.relationships.values()),
        )

    def _retractions(
        self,
        statement: str,
        request: ExtractionInput,
        self_name: str,
        forms: list[tuple[re.Pattern[str], KnownEntity]],
        out: Collected,
    ) -> list[ExtractedFact]:
        """RETRACTs for "forget that <statement>": of the known fact it names, else of the
        fact with the same text (reconciliation finds it by fingerprint, or rejects)."""
        facts: list[ExtractedFact] = []
        for clause in split_clauses(statement):
            first_person = bool(FIRST_PERSON_I.search(clause) or FIRST_PERSON.search(clause))
            names = names_in(clause, self_name, forms)
            subject = self_name if first_person else (names[0][0] if names else None)
            if subject is None:
                continue
            subject = canonical_name(subject, forms)
            text = speaker_named(clause, request.speaker, subject == self_name)
            known = matching_known_fact(request, subject, text)
            facts.append(
                ExtractedFact(
                    text=text[:2000],
                    action="RETRACT",
                    target_fact_id=None if known is None else known.fact_id,
                    entity=out.entity(subject, type_of(subject, names)),
                    attribute_key=None if known is None else known.attribute_key,
                    category="personal",
                    confidence_level=ConfidenceLevel.explicit_statement,
                )
            )
        return facts

    @staticmethod
    def _introduction(clause: str, self_name: str, out: Collected) -> ExtractedFact:
        """A self-introduction ("Eu sou o João") by a speaker not known by that name: the
        speaker's name, kept verbatim (rewritten to the speaker it would read "user é o João")."""
        return ExtractedFact(
            text=clause[:2000],
            entity=out.entity(self_name, "person"),
            attribute_key="name",
            category="personal",
            confidence_level=ConfidenceLevel.explicit_statement,
        )

    def _subject_before(
        self, sentence: str, pos: int, names: list[tuple[str, str, int]], first_person: bool
    ) -> str | None:
        """Who a pattern matched at ``pos`` is about: the name right before it, or self."""
        prefix = sentence[:pos]
        for name, _, start in reversed(names):
            if start < pos and re.fullmatch(
                rf"\s*(?:{NAME_WORD_PATTERN}\s+){{0,2}}", prefix[start + len(name) :]
            ):
                return name
        if re.search(
            r"\b(?:my|our|his|her|their|minha|meu|nossa|nosso|sua|seu)\s+\w+(?:\s+\w+)?\s*$",
            prefix,
            re.IGNORECASE,
        ):
            return ""  # "my sister lives in ...": about someone unnamed
        if re.search(
            r"(?:\bI\b|\bI['’]m\b|\bwe\b|\beu\b|\bnós\b)\s*(?:\w+\s+){0,2}$", prefix, re.IGNORECASE
        ) or re.search(r"\bI\s*(?:\w+\s+){0,2}$", prefix):
            return None  # self
        if first_person:
            return None
        return ""  # unknown subject (he/she/they...): no attribute

    def _attribute_match(
        self,
        sentence: str,
        names: list[tuple[str, str, int]],
        first_person: bool,
        self_name: str,
    ) -> tuple[AttributePattern, str, str] | None:
        """The earliest attribute statement in the sentence: (pattern, subject, value)."""
        best: tuple[int, AttributePattern, str, str] | None = None
        for pattern in ATTRIBUTE_PATTERNS:
            for m in pattern.regex.finditer(sentence):
                if best is not None and m.start() >= best[0]:
                    break
                value = m.group("obj").strip()
                if pattern.attribute == "job_title":
                    value = job_title(value) or ""
                    if not value:
                        continue
                who = self._subject_before(sentence, m.start(), names, first_person)
                if who == "":
                    continue
                best = (m.start(), pattern, self_name if who is None else who, value)
                break
        return None if best is None else best[1:]

    def _sentence_fact(
        self,
        sentence: str,
        request: ExtractionInput,
        self_name: str,
        forms: list[tuple[re.Pattern[str], KnownEntity]],
        out: Collected,
    ) -> ExtractedFact | None:
        if sentence.endswith("?") or is_greeting_sentence(sentence):
            return None
        short = len(NAME_WORD_RE.findall(sentence)) < 3
        first_person = bool(FIRST_PERSON_I.search(sentence) or FIRST_PERSON.search(sentence))
        names = names_in(sentence, self_name, forms)
        if not first_person and not names:
            return None

        claim = self._claim(sentence, request, self_name, names, first_person)
        related = relate_people(sentence, self_name, forms, out)
        if related:
            claim.category = claim.category or "relationship"
            claim.confidence = ConfidenceLevel.explicit_statement
            claim.subject = claim.subject or self_name

        if short and claim.attribute is None and not related:
            return None  # "Sou casado." is worth keeping; "I see." is not
        subject = claim.subject if claim.subject is not None else names[0][0]
        subject = out.entity(canonical_name(subject, forms), type_of(subject, names))
        obj_name = claim.obj_name
        if obj_name:
            obj_type = known_type(obj_name, forms) or claim.obj_type or "other"
            obj_name = out.entity(canonical_name(obj_name, forms), obj_type)
            if claim.relation:
                out.relate(subject, obj_name, claim.relation)
        mentions = mentions_of(subject, obj_name, first_person, self_name, names, forms, out)

        text = speaker_named(sentence, request.speaker, subject == self_name)
        category = claim.category
        if category is None:
            category = next((cat for cat, rx in CATEGORY_HINTS if rx.search(sentence)), "personal")
        return ExtractedFact(
            text=text[:2000],
            action=claim.action,  # type: ignore[arg-type]
            target_fact_id=claim.target,
            entity=subject,
            mentions=mentions,
            attribute_key=claim.attribute,
            category=category,
            confidence_level=claim.confidence,
        )

    def _claim(
        self,
        sentence: str,
        request: ExtractionInput,
        self_name: str,
        names: list[tuple[str, str, int]],
        first_person: bool,
    ) -> Claim:
        """What the sentence says of whom, and how that meets what memory holds."""
        claim = Claim(subject=self_name if first_person else None)
        negated = next((attr for attr, rx in NEGATIONS if rx.search(sentence)), None)
        if negated:
            # A negation is a RETRACT only of a fact memory actually holds; otherwise it is
            # kept as a plain fact *without* the attribute (it must not supersede anything).
            subj_name = self_name if first_person else (names[0][0] if names else None)
            known = known_attribute_fact(request, subj_name, negated) if subj_name else None
            if known is not None:
                claim.action, claim.target, claim.subject = "RETRACT", known.fact_id, subj_name
                claim.attribute = negated
                claim.confidence = ConfidenceLevel.explicit_statement
            claim.category = "work" if negated == "workplace" else "personal"
            return claim
        found = self._attribute_match(sentence, names, first_person, self_name)
        if found is None:
            return claim
        pattern, claim.subject, value = found
        claim.attribute, claim.category = pattern.attribute, pattern.category
        claim.confidence = ConfidenceLevel.explicit_statement
        if pattern.obj_type:
            claim.obj_name = leading_name(value)
            claim.obj_type, claim.relation = pattern.obj_type, pattern.relation
        attribute = claim.attribute
        known = known_attribute_fact(request, claim.subject, attribute) if attribute else None
        same_value = known is not None and fold_case(claim.obj_name or value) in fold_case(
            known.text
        )
        if known is not None and not same_value:
            claim.action, claim.target = "UPDATE", known.fact_id
        return claim
