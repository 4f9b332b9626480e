"""What an extractor (LLM or rule-based) returns for one message.

This is the contract between extraction (services) and reconciliation (domain): the
extractor proposes, the aggregate decides. Everything is validated with pydantic because
the LLM's JSON is untrusted input.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, Field

from engramdb.domain.directives import ExtractedDirective
from engramdb.domain.emotion import ExtractedEmotion


class ConfidenceLevel(StrEnum):
    explicit_statement = "explicit_statement"
    strong_inference = "strong_inference"
    weak_inference = "weak_inference"
    speculation = "speculation"


CONFIDENCE_BY_LEVEL: dict[ConfidenceLevel, float] = {
    ConfidenceLevel.explicit_statement: 0.95,
    ConfidenceLevel.strong_inference: 0.80,
    ConfidenceLevel.weak_inference: 0.60,
    ConfidenceLevel.speculation: 0.40,
}
DEFAULT_CONFIDENCE = 0.60


class ExtractedEntity(BaseModel):
    """An entity as the extractor saw it; resolution maps it to an ``entity_key``."""

    name: str = Field(min_length=1, max_length=200)
    entity_type: str = Field(default="person", max_length=40)  # person, organization, place, ...


class ExtractedRelationship(BaseModel):
    source: str = Field(min_length=1, max_length=200)  # entity name as in ``entities``
    target: str = Field(min_length=1, max_length=200)
    relation_type: str = Field(min_length=1, max_length=60)  # married_to, works_at, ...


class ExtractedFact(BaseModel):
    """One atomic statement. ``action`` NEW adds, UPDATE supersedes ``target_fact_id``,
    RETRACT invalidates ``target_fact_id`` (explicit retraction). NOOP is decided by
    reconciliation, not by the extractor."""

    text: str = Field(min_length=1, max_length=2000)
    action: Literal["NEW", "UPDATE", "RETRACT"] = "NEW"
    target_fact_id: str | None = None
    entity: str = Field(min_length=1, max_length=200)  # primary subject (entity name)
    mentions: list[str] = Field(default_factory=list)  # other entity names mentioned
    attribute_key: str | None = Field(default=None, max_length=60)
    category: str = Field(default="general", max_length=40)
    confidence_level: ConfidenceLevel | None = None
    source_message_ids: list[str] = Field(default_factory=list)  # default: the message itself

    @property
    def confidence(self) -> float:
        if self.confidence_level is None:
            return DEFAULT_CONFIDENCE
        return CONFIDENCE_BY_LEVEL[self.confidence_level]


class Extraction(BaseModel):
    """``emotion`` and ``directives`` (instructions to the agent, ADR-0045) come first: a
    schema-constrained model writes the fields in this order, and one that has just written
    its facts tends to close the answer with an empty list (issue 26, measured on 1.5B)."""

    emotion: ExtractedEmotion | None = None
    directives: list[ExtractedDirective] = Field(default_factory=list)
    facts: list[ExtractedFact] = Field(default_factory=list)
    entities: list[ExtractedEntity] = Field(default_factory=list)
    relationships: list[ExtractedRelationship] = Field(default_factory=list)


class KnownFact(BaseModel):
    """An existing active fact shown to the extractor (pre-retrieval)."""

    fact_id: str
    text: str
    entity_key: str
    attribute_key: str | None = None


class KnownEntity(BaseModel):
    entity_key: str
    display_name: str
    entity_type: str
    aliases: list[str] = Field(default_factory=list)
    profile_text: str = ""


class ExtractionInput(BaseModel):
    """Everything an extractor may look at: the message and what memory already holds."""

    agent_id: str
    message_id: str
    session_id: str | None = None
    speaker: str | None = None
    text: str
    occurred_at: datetime
    known_entities: list[KnownEntity] = Field(default_factory=list)
    known_facts: list[KnownFact] = Field(default_factory=list)
    max_facts: int = 100


#: ``ExtractorInfo.extractor`` of a turn stored without inference (``infer=False``, ADR-0049).
STORED_ONLY = "none (infer=False)"
#: every name a stored-only turn's ``Processed`` carries: ``"none"`` is what issue 24's first
#: record-only path wrote, before the one path of ADR-0049
STORED_ONLY_EXTRACTORS = frozenset({STORED_ONLY, "none"})


class ExtractorInfo(BaseModel):
    """Who decided: recorded as provenance on every fact event."""

    extractor: str  # "llm", "rule-based", "observations", "user", ...
    model: str | None = None
    prompt_version: str | None = None
