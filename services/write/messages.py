"""The conversation message on the bus: its schema, its limits and the NATS subject scheme.

Why the limits are what they are (ADR-0004):
- ``text`` is at most ``MAX_TEXT_BYTES`` = 64 KiB of UTF-8. A conversation turn is a few
  hundred bytes; 64 KiB is ~16k tokens, above what one extraction prompt should carry, and
  it keeps a single JetStream message far below the server's 1 MiB default ``max_payload``.
  Longer input is rejected with a reason instead of being silently truncated (a truncated
  message stored "verbatim" would be a lie).
- NUL characters are rejected everywhere (text, ids, metadata): PostgreSQL ``text`` and
  ``jsonb`` cannot store U+0000, so such a message would be recorded in the event log and
  then break every projector that copies it into a read model.
- Lone UTF-16 surrogates are rejected: they cannot be encoded as UTF-8, so they could not
  be stored at all.
- ``occurred_at`` must be timezone-aware in storage; a naive value is taken as UTC (the
  only reading that does not depend on the ingest host's local zone). It must lie in
  ``domain.time_range``'s window (1900 to 2199): a year-10000 instant was stored and then
  broke every read of the agent (ADR-0012).

Subjects: ``<prefix>.messages.<agent_token>``. ``agent_token`` is a hash of the agent id in
lower-case base32 (no ``.``, ``*``, ``>`` or whitespace can appear), so JetStream keeps the
order of one agent's messages on one subject and consumers can be partitioned by subject.
The payload, not the subject, carries the real ``agent_id``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from engramdb.domain.agent_id import AGENT_ID_MAX_CHARS, AGENT_ID_PATTERN, AGENT_ID_RULE
from engramdb.domain.time_range import TIME_RULE, check_instant

DEFAULT_PREFIX = "engramdb"
MAX_TEXT_BYTES = 64 * 1024
MAX_METADATA_BYTES = 16 * 1024
MAX_ID_CHARS = AGENT_ID_MAX_CHARS  # message, session and speaker ids share the agent id's cap
DUPLICATE_WINDOW_SEC = 120.0
# A dead letter copies the payload twice (text + base64); above this size it would come near
# NATS's 1 MiB max_payload and could not be published at all, so it refers to the original,
# which stays in the messages stream (ADR-0012).
DEADLETTER_INLINE_MAX_BYTES = 256 * 1024
DEADLETTER_PREVIEW_BYTES = 1024


def messages_max_age() -> float:
    """Seconds the message stream keeps a published turn (``ENGRAMDB_NATS_MESSAGES_MAX_AGE_DAYS``,
    default 7; 0 = forever). The stream holds raw text in clear: erasing an agent (ADR-0018)
    cannot reach it, so it must not keep turns longer than ingestion needs."""
    from engramdb.infra.settings import load_settings

    return max(0.0, load_settings().nats_messages_max_age_days) * 86400.0


def deadletter_max_age() -> float:
    """Seconds the dead-letter stream keeps a letter (``ENGRAMDB_NATS_DEADLETTER_MAX_AGE_DAYS``,
    default 30; 0 = forever). Letters copy small payloads inline — raw turns in clear — so
    they are bounded like the message stream (issue 28), long enough for someone to look."""
    from engramdb.infra.settings import load_settings

    return max(0.0, load_settings().nats_deadletter_max_age_days) * 86400.0


_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def is_message_id(value: object) -> bool:
    """Whether ``value`` passes the rules of ``ConversationMessage.message_id``: an id an
    extractor cites is checked with this before it is looked up (or hashed) at all."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_ID_CHARS:
        return False
    if _CONTROL_RE.search(value):
        return False
    try:
        _check_storable(value, "message id")
    except ValueError:
        return False
    return True


class InvalidMessage(ValueError):
    """A payload that can never become a stored message; ``reason`` says why (one line)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MessageIdConflict(ValueError):
    """A message id already recorded for this agent with a different text: the id is the
    idempotency key, so the new text would otherwise be dropped silently. The stored original
    stays; the caller is told (HTTP 409, a NATS dead letter with reason "message id conflict")."""

    def __init__(self, agent_id: str, message_id: str) -> None:
        super().__init__(
            f"message id conflict: agent {agent_id!r} already has message {message_id!r:.80} with a different "
            "text; the original is kept. Use a new message_id for a new message."
        )
        self.agent_id = agent_id
        self.message_id = message_id


def _check_storable(value: str, what: str) -> str:
    if "\x00" in value:
        raise ValueError(f"{what} contains a NUL character (U+0000), which PostgreSQL cannot store")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} contains an unpaired surrogate, which is not valid Unicode") from exc
    return value


def _check_json_value(value: Any, path: str, depth: int = 0) -> None:
    if depth > 16:
        raise ValueError(f"metadata nests deeper than 16 levels at {path}")
    if isinstance(value, str):
        _check_storable(value, f"metadata value {path}")
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"metadata key {key!r} at {path} is not a string")
            _check_storable(key, f"metadata key at {path}")
            _check_json_value(item, f"{path}.{key}", depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_json_value(item, f"{path}[{index}]", depth + 1)
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"metadata value {path} is not a finite number")
    elif value is not None and not isinstance(value, (bool, int)):
        raise ValueError(f"metadata value {path} is a {type(value).__name__}, not JSON")


class ConversationMessage(BaseModel):
    """One conversation turn as published on NATS and as accepted by ``WritePipeline``."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    agent_id: str = Field(
        min_length=1,
        max_length=MAX_ID_CHARS,
        pattern=AGENT_ID_PATTERN,
        description=f"tenant id: {AGENT_ID_RULE}",
    )
    message_id: str = Field(
        default_factory=lambda: uuid.uuid4().hex,
        min_length=1,
        max_length=MAX_ID_CHARS,
        description="idempotency key; a redelivered message id is a no-op (default: a uuid)",
    )
    session_id: str | None = Field(default=None, max_length=MAX_ID_CHARS)
    speaker: str | None = Field(default=None, max_length=MAX_ID_CHARS)
    text: str = Field(description=f"the turn, verbatim; 1 to {MAX_TEXT_BYTES} UTF-8 bytes")
    occurred_at: datetime = Field(
        default_factory=lambda: datetime.now(UTC),
        description=f"when it was said: {TIME_RULE}; naive values are taken as UTC",
    )
    metadata: dict[str, Any] = Field(default_factory=dict)
    infer: bool = Field(
        default=True,
        description="false: store the turn only (searchable, no extraction, no decisions); "
        "Mem0's infer=False (ADR-0049)",
    )

    @field_validator("message_id", "session_id", "speaker")
    @classmethod
    def _no_control_chars(cls, value: str | None, info: Any) -> str | None:
        if value is None:
            return None
        _check_storable(value, info.field_name)
        if _CONTROL_RE.search(value):
            raise ValueError(f"{info.field_name} contains a control character")
        if not value.strip():
            raise ValueError(f"{info.field_name} is blank")
        return value

    @field_validator("text")
    @classmethod
    def _text_storable(cls, value: str) -> str:
        _check_storable(value, "text")
        if not value.strip():
            raise ValueError("text is empty or whitespace only")
        size = len(value.encode("utf-8"))
        if size > MAX_TEXT_BYTES:
            raise ValueError(f"text is {size} bytes of UTF-8; the limit is {MAX_TEXT_BYTES}")
        return value

    @field_validator("occurred_at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        return check_instant(value, "occurred_at")

    @field_validator("metadata")
    @classmethod
    def _metadata_json(cls, value: dict[str, Any]) -> dict[str, Any]:
        _check_json_value(value, "metadata")
        size = len(json.dumps(value, ensure_ascii=False, default=str).encode("utf-8"))
        if size > MAX_METADATA_BYTES:
            raise ValueError(f"metadata is {size} bytes as JSON; the limit is {MAX_METADATA_BYTES}")
        return value

    def to_json_bytes(self) -> bytes:
        return self.model_dump_json().encode("utf-8")


class DeadLetter(BaseModel):
    """Body of a dead-letter message (headers repeat ``reason``/``stage``/subject). Small
    payloads are copied inline; larger ones are kept by reference (``by_reference``)."""

    reason: str
    stage: str = Field(description="validation | processing")
    agent_id: str | None = None
    subject: str
    stream: str | None = None
    stream_seq: int | None = None
    deliveries: int | None = None
    payload: str | None = Field(default=None, description="original payload if it is UTF-8 (inline letters)")
    payload_b64: str | None = Field(
        default=None, description="original payload bytes, base64 (inline letters; absent when by_reference)"
    )
    by_reference: bool = Field(
        default=False,
        description="the payload was too large to copy: it stays in `stream` at `stream_seq` "
        "(read it with a JetStream direct get); `payload_preview` shows its start",
    )
    payload_bytes: int | None = Field(default=None, description="size of the original payload")
    payload_preview: str | None = Field(
        default=None, description=f"first {DEADLETTER_PREVIEW_BYTES} bytes, decoded leniently (by_reference only)"
    )
    headers: dict[str, str] = Field(default_factory=dict)


def _reason(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "message"
        msg = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{where}: {msg}")
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def parse_message(payload: bytes | str | dict[str, Any]) -> ConversationMessage:
    """Validate a payload from the bus; raise ``InvalidMessage`` with a one-line reason."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        raw = bytes(payload)
        if len(raw) > MAX_TEXT_BYTES + MAX_METADATA_BYTES + 4096:
            raise InvalidMessage(f"payload is {len(raw)} bytes; far above the message limits")
        try:
            payload = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidMessage(f"payload is not UTF-8: {exc.reason} at byte {exc.start}") from exc
    if isinstance(payload, str):
        if not payload.strip():
            raise InvalidMessage("payload is empty")
        try:
            data = json.loads(payload)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InvalidMessage(f"payload is not JSON: {exc}") from exc
    else:
        data = payload
    if not isinstance(data, dict):
        raise InvalidMessage(f"payload is a JSON {type(data).__name__}, expected an object")
    try:
        return ConversationMessage.model_validate(data)
    except ValidationError as exc:
        raise InvalidMessage(_reason(exc)) from exc


# ----- subjects and streams ------------------------------------------------------------------


def agent_token(agent_id: str) -> str:
    """Subject-safe, fixed-length token for an agent id (16 chars of base32 = 80 bits)."""
    digest = hashlib.sha256(agent_id.encode("utf-8")).digest()
    return base64.b32encode(digest).decode("ascii")[:16].lower()


def message_subject(agent_id: str, prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.messages.{agent_token(agent_id)}"


def messages_wildcard(prefix: str = DEFAULT_PREFIX) -> str:
    """What the message stream captures: ``<prefix>.messages.<agent-token>``, one token
    exactly (ADR-0051). Not ``messages.>``: a deeper subject (``messages.x.y.z``) was stored
    and never consumed, and ``messages.<p>.<token>`` skipped the server's partition mapping;
    now both are refused by JetStream (no stream answers) instead of being kept silently.
    The stored subjects, ``messages.<p>.<token>``, come from the stream's transform."""
    return f"{prefix}.messages.*"


def deadletter_subject(prefix: str = DEFAULT_PREFIX) -> str:
    return f"{prefix}.deadletter.messages"


def messages_stream_name(prefix: str = DEFAULT_PREFIX) -> str:
    return re.sub(r"[^A-Z0-9_]", "_", prefix.upper()) + "_MESSAGES"


def deadletter_stream_name(prefix: str = DEFAULT_PREFIX) -> str:
    return re.sub(r"[^A-Z0-9_]", "_", prefix.upper()) + "_DEADLETTER"


def dedup_id(agent_id: str, message_id: str) -> str:
    """``Nats-Msg-Id`` for server-side de-duplication (ids may hold any printable text)."""
    return hashlib.sha256(f"{agent_id}\x00{message_id}".encode()).hexdigest()[:40]
