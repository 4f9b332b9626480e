"""The shapes of ``add_facts`` (ADR-0049): facts a client decided itself, and what is refused.

Why the rules are these: a client fact becomes the same ``FactAdded`` an extractor's would,
so it must pass what the log and the read models can hold (text 1..2000 characters without
NUL, instants in ``domain.time_range``'s window, JSON metadata), plus what only a client can
get wrong: ``valid_from`` after ``valid_to``, a ``valid_to`` in the future (a fact ending
later is not supported: it would have to stay current until then, and nothing schedules that),
and sources that are not recorded turns of the agent (checked by the writer, against the log).
Every refusal names the fact (``facts[2].valid_to``) so HTTP answers 422 and NATS dead-letters
with that reason. Shared by every surface (the facade, HTTP, NATS, MCP, CLI, import).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from engramdb.domain.agent_id import AGENT_ID_PATTERN, AGENT_ID_RULE
from engramdb.domain.payloads import MAX_SOURCE_MESSAGES
from engramdb.domain.time_range import TIME_RULE, check_instant
from engramdb.services.write.messages import MAX_ID_CHARS, _check_json_value, is_message_id

MAX_FACTS_PER_CALL = 100
MAX_FACT_METADATA_BYTES = 4 * 1024


class InvalidClientFacts(ValueError):
    """Facts that can never be recorded; ``field`` names the one at fault (``facts[1].sources``)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _storable(value: str, what: str) -> str:
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL character (U+0000), which PostgreSQL cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} contains an unpaired surrogate") from exc
    return value


class ClientFact(BaseModel):
    """One fact the client decided: about ``subject`` (an entity name, resolved like an
    extracted one), valid from ``valid_from`` (default: now) until ``valid_to`` (default: still
    valid), resting on ``sources`` (message ids of this agent, optional)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    subject: str = Field(min_length=1, max_length=200, description="who or what it is about")
    text: str = Field(min_length=1, max_length=2000, description="the statement")
    sources: list[str] = Field(default_factory=list, max_length=MAX_SOURCE_MESSAGES,
                               description="message ids of this agent the fact rests on")
    valid_from: datetime | None = Field(default=None, description=f"{TIME_RULE}; default: now")
    valid_to: datetime | None = Field(default=None, description="when it stopped being true (past)")
    metadata: dict[str, Any] = Field(default_factory=dict, description="kept in its provenance")
    attribute_key: str | None = Field(default=None, max_length=60,
                                      description="a single-valued attribute (residence): UPDATEs")
    category: str = Field(default="general", min_length=1, max_length=40)
    entity_type: str = Field(default="person", min_length=1, max_length=40)

    @field_validator("subject", "text", "category", "entity_type", "attribute_key")
    @classmethod
    def _not_blank(cls, value: str | None, info: Any) -> str | None:
        if value is None:
            return None
        _storable(value, info.field_name)
        if not value.strip():
            raise ValueError(f"{info.field_name} is empty or whitespace only")
        return value

    @field_validator("sources")
    @classmethod
    def _message_ids(cls, value: list[str]) -> list[str]:
        for mid in value:
            if not is_message_id(mid):
                raise ValueError(f"source {mid!r:.80} is not a message id")
        if len(set(value)) != len(value):
            raise ValueError("sources repeat a message id")
        return value

    @field_validator("valid_from", "valid_to")
    @classmethod
    def _in_range(cls, value: datetime | None, info: Any) -> datetime | None:
        return None if value is None else check_instant(value, info.field_name)

    @field_validator("metadata")
    @classmethod
    def _json(cls, value: dict[str, Any]) -> dict[str, Any]:
        _check_json_value(value, "metadata")
        size = len(json.dumps(value, ensure_ascii=False).encode("utf-8"))
        if size > MAX_FACT_METADATA_BYTES:
            raise ValueError(f"metadata is {size} bytes as JSON; the limit is {MAX_FACT_METADATA_BYTES}")
        return value

    @model_validator(mode="after")
    def _window(self) -> ClientFact:
        if self.valid_to is not None:
            if self.valid_to > datetime.now(UTC):
                raise ValueError("valid_to is in the future; a fact that ends later is recorded "
                                 "without valid_to and ended (deleted) when it ends")
            if self.valid_from is not None and self.valid_from >= self.valid_to:
                raise ValueError("valid_from is not before valid_to")
        return self


class AddFactsRequest(BaseModel):
    """``POST /v1/facts`` and the NATS ``facts`` subject's payload."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent_id: str = Field(min_length=1, max_length=MAX_ID_CHARS, pattern=AGENT_ID_PATTERN,
                          description=f"tenant id: {AGENT_ID_RULE}")
    facts: list[ClientFact] = Field(min_length=1, max_length=MAX_FACTS_PER_CALL)

