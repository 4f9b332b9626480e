"""The shapes of memory management (issue 11): filters in, pages and items out, errors.

One set of models serves every surface — Python ``Memory``, HTTP ``/v1``, NATS
``engramdb.manage.<op>`` and the CLI — so a filter has the same name and meaning everywhere.
Filters forbid unknown fields: a misspelt filter is a 422 / validation error, never silently
ignored (an ignored ``speakr=Ana`` would return every fact and look like an answer).

Pagination is by an opaque cursor over a stable order (each list names its sort key). The
cursor is the last item's sort key, base64url-encoded JSON: clients must not build one, and a
cursor that does not decode is a validation error naming ``cursor``.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from engramdb.domain.time_range import check_instant
from engramdb.services.management.audit_models import FactSnapshot

MAX_LIMIT = 500
DEFAULT_LIMIT = 50

FactStatus = Literal["active", "superseded", "retracted", "forgotten", "all"]


class NotFoundError(LookupError):
    """The agent or fact named does not exist (HTTP 404, CLI exit 2, NATS ``not_found``)."""


class NotActiveError(ValueError):
    """The fact exists but is no longer active, so it cannot be deleted (HTTP 409)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        """PostgreSQL text cannot hold NUL: refuse it here (a 422) rather than fail in SQL."""
        if isinstance(value, str) and "\x00" in value:
            raise ValueError("must not contain NUL characters")
        return value


class PageParams(_Strict):
    limit: int = Field(default=DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description="items per page")
    cursor: str | None = Field(
        None, max_length=2000, description="`next_cursor` of the previous page (opaque)"
    )


class FactFilter(PageParams):
    """Which facts to list. Order: transaction time (``recorded_at``), then ``fact_id``."""

    status: FactStatus | None = Field(
        None,
        description="default `active`; `all` when `valid_at` or `as_of` is given",
    )
    entity: str | None = Field(
        None, max_length=200, description="entity key or name/alias: facts about or naming it"
    )
    session: str | None = Field(default=None, max_length=200, description="facts sourced from this session")
    speaker: str | None = Field(default=None, max_length=200, description="who stated the fact")
    valid_at: datetime | None = Field(
        None, description="facts true at this time (valid time, as memory knows now)"
    )
    as_of: datetime | None = Field(
        None, description="facts memory held then, as it knew them then (bi-temporal)"
    )
    text: str | None = Field(
        None, min_length=1, max_length=500, description="fact text contains (case-insensitive)"
    )
    category: str | None = Field(
        None, min_length=1, max_length=40,
        description="facts of this category; `directive`: the procedural directives (ADR-0045)",
    )

    @field_validator("valid_at", "as_of")
    @classmethod
    def _utc_if_naive(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        """A time without a zone is UTC (as everywhere in engramdb), not the server's zone;
        outside ADR-0012's window it is refused, as retrieve refuses it (issue 28)."""
        return None if value is None else check_instant(value, str(info.field_name))


class MessageFilter(PageParams):
    """Which messages to list. Order: ``occurred_at``, then ``message_id``."""

    session: str | None = Field(default=None, max_length=200)
    speaker: str | None = Field(default=None, max_length=200)


class FactItem(FactSnapshot):
    speaker: str | None = None
    metadata: dict[str, Any] = Field(
        default_factory=dict, description="inherited from the source turns (the fact's own first)"
    )


class SourceMessage(BaseModel):
    message_id: str
    text: str | None = Field(default=None, description="null when the message is not (yet) projected")
    speaker: str | None = None
    session_id: str | None = None
    occurred_at: datetime | None = None
    hidden: bool = Field(default=False, description="hidden from retrieval (retracted or forgotten)")
    metadata: dict[str, Any] = Field(default_factory=dict)


class FactDetail(FactItem):
    """One fact with its provenance: the turns it rests on and where its decisions are."""

    linked_entities: list[str] = Field(default_factory=list)
    sources: list[SourceMessage] = Field(default_factory=list)
    history: str = Field(description="path of the fact's decision history (HTTP); "
                         "`Memory.history(agent_id, fact_id)` in Python")


class EntityItem(BaseModel):
    entity_key: str
    display_name: str
    entity_type: str
    aliases: list[str]
    created_at: datetime
    active_facts: int
    profile: str = Field(default="", description="English profile from the entity's facts "
                         "(profiles job, ADR-0022); empty until the job ran")
    profile_method: str | None = Field(default=None, description="who wrote it: "
                                       "'template-v1' (offline) or 'llm:<prompt>'")
    profile_refreshed_at: datetime | None = Field(default=None, description="memory time of "
                                                  "the last refresh")


class AgentItem(BaseModel):
    agent_id: str
    opened_at: datetime
    active_facts: int
    messages: int
    forgotten_at: datetime | None = Field(default=None, description="last \"forget everything\"")


class MessageItem(BaseModel):
    message_id: str
    session_id: str | None
    speaker: str | None
    text: str
    occurred_at: datetime
    recorded_at: datetime
    processed: bool
    extractor: str | None
    extraction_error: str | None
    hidden: bool = Field(description="hidden from retrieval (retracted or forgotten)")
    metadata: dict[str, Any] = Field(default_factory=dict, description="as written with the turn")
    emotion: str | None = Field(None, description="the emotion the extraction read (issue 26)")
    emotion_intensity: float | None = Field(None, description="0..1 (low 0.3, medium 0.6, high 0.9)")
    emotion_detector: str | None = Field(
        None, description="who read it: `llm` (the extraction call) or `lexicon` (offline word list)"
    )


T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = Field(default=None, description="pass as `cursor` for the next page")


class DeleteResult(BaseModel):
    agent_id: str
    fact_id: str
    status: str = "retracted"
    position: int = Field(description="notification id to wait for (read-your-writes)")


class ForgetResult(BaseModel):
    agent_id: str
    facts_ended: int
    position: int = Field(description="notification id to wait for (read-your-writes)")


class EraseResult(BaseModel):
    """What ``erase_agent`` did (ADR-0018). ``position``: the ``Erased`` marker's notification
    id (0 when the agent was already erased and only the cleanup ran again)."""

    agent_id: str
    already_erased: bool = Field(description="the key was already destroyed before this call")
    aggregates: int = Field(description="aggregates (agent + message records) made unreadable")
    clear_events_scrubbed: int = Field(
        description="events stored unencrypted before encryption existed, overwritten"
    )
    read_model_rows_deleted: int
    position: int = Field(description="notification id to wait for (read-your-writes)")
    tables_rewritten: list[str] = Field(
        default_factory=list,
        description="tables rewritten so no dead copy of the agent's rows stays in their "
        "files (issue 28, ADR-0051)",
    )
    stream_messages_deleted: int | None = Field(
        default=None, description="the agent's turns and changes deleted from the NATS message "
        "and change streams (None: this process uses no NATS)",
    )
    dead_letters_deleted: int | None = Field(
        default=None, description="the agent's ingest and webhook dead letters deleted "
        "(None: no NATS here)"
    )


class ActorBody(_Strict):
    actor: str | None = Field(default=None, min_length=1, max_length=200, description="who asked")


def check_actor(actor: str | None, default: str) -> str:
    """Who asked, for the event's ``decided_by``: non-empty, printable, at most 200 chars."""
    value = default if actor is None else actor.strip()
    if not value or len(value) > 200 or not value.isprintable():
        raise ValueError("actor must be 1-200 printable characters naming who asked")
    return value


# ----- cursors ---------------------------------------------------------------------------


def encode_cursor(*key: Any) -> str:
    plain = [k.isoformat() if isinstance(k, datetime) else k for k in key]
    return base64.urlsafe_b64encode(json.dumps(plain).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, kinds: tuple[type, ...]) -> tuple[Any, ...]:
    """The sort key inside a cursor; ``ValueError`` naming ``cursor`` if it is not ours."""
    try:
        raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if not isinstance(raw, list) or len(raw) != len(kinds):
            raise ValueError
        return tuple(
            datetime.fromisoformat(v) if kind is datetime else kind(v)
            for v, kind in zip(raw, kinds, strict=True)
        )
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise ValueError(
            "cursor is not one this API returned: pass `next_cursor` from the previous page"
        ) from None


class ReprocessOutcome(BaseModel):
    """What reprocessing one message did."""

    message_id: str
    generation: int = Field(description="1 for the first reprocess of this message, 2 next…")
    ended_fact_ids: list[str] = Field(default_factory=list, description="facts ended (reprocessed)")
    decisions: dict[str, int] = Field(default_factory=dict, description="the new decisions, by kind")
    extraction_error: str | None = None
    llm_unavailable: bool = Field(default=False, description="LLM outage: nothing was changed")
    stored_only: bool = Field(
        default=False, description="written with infer=False: not extracted, nothing changed"
    )


class ReprocessResult(BaseModel):
    agent_id: str
    messages: list[ReprocessOutcome] = Field(default_factory=list)
    skipped: list[str] = Field(
        default_factory=list, description="not processed yet (pending: use --failed)"
    )
    stored_only: list[str] = Field(
        default_factory=list, description="written with infer=False: never extracted (ADR-0049)"
    )
    position: int = Field(default=0, description="notification id to wait for (read-your-writes)")


class UpdateResult(BaseModel):
    """What ``Memory.update_fact`` did (issue 24): ``fact_id`` was superseded by
    ``new_fact_id`` saying ``text`` (a ``FactUpdated`` decided by the user)."""

    agent_id: str
    fact_id: str
    new_fact_id: str
    text: str
    position: int = Field(description="notification id to wait for (read-your-writes)")
