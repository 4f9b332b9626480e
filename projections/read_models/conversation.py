"""Read model ``conversation``: the raw conversation log, one row per recorded message.

Written from ``MessageRecord`` events: ``Recorded`` inserts the message with the vector of its
text, ``Processed`` marks it processed with the extractor that read it (``Processed`` events
carry only the record's originator id, hence the unique ``record_id``).

``mem_extraction_pending`` lists messages whose extraction an LLM outage deferred
(``ExtractionDeferred``) until a ``Processed`` resolves them (ADR-0014). It is a second table
of this model rather than a model of its own: no extra projector, and a database made before
it gets the (empty) table at start — no event it would hold existed then.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from uuid import UUID

from engramdb.domain.aggregate import AgentMemory, MessageRecord
from engramdb.domain.emotion import ExtractedEmotion
from engramdb.projections.embeddings import CACHED_VECTOR_SQL
from engramdb.projections.erasure import drop_agent_rows
from engramdb.projections.handlers import handles
from engramdb.projections.read_model import BulkFold, ReadModel, ReadModelView, jsonb
from engramdb.projections.search import SEARCH_FUNCTIONS, search_columns, search_index, stats_index
from engramdb.projections.tables import EMBEDDING, VECTOR, Table

MESSAGES = Table(
    "mem_messages",
    columns=(
        ("agent_id", "text NOT NULL"),
        ("message_id", "text NOT NULL"),
        ("session_id", "text"),
        ("speaker", "text"),
        ("text", "text NOT NULL"),
        ("occurred_at", "timestamptz NOT NULL"),
        ("recorded_at", "timestamptz NOT NULL"),
        ("metadata", "jsonb NOT NULL DEFAULT '{}'::jsonb"),
        ("processed", "boolean NOT NULL DEFAULT false"),
        ("extractor", "text"),
        ("llm_calls", "integer NOT NULL DEFAULT 0"),
        ("extraction_error", "text"),
        (EMBEDDING, VECTOR),
        ("record_id", "uuid NOT NULL"),
        # issue 26: the emotion the extraction read (``Processed.extraction["emotion"]``) and
        # who read it (``llm`` or ``lexicon``); NULL = none recorded
        ("emotion", "text"),
        ("emotion_intensity", "real"),
        ("emotion_detector", "text"),
    ),
    added=("emotion", "emotion_intensity", "emotion_detector"),
    primary_key=("agent_id", "message_id"),
    indexes=(
        "CREATE INDEX IF NOT EXISTS mem_messages_time ON mem_messages (agent_id, occurred_at)",
        "CREATE UNIQUE INDEX IF NOT EXISTS mem_messages_record ON mem_messages (record_id)",
        # keyword search without contrib: a language-neutral tsvector GIN index (ADR-0006)
        "CREATE INDEX IF NOT EXISTS mem_messages_text_tsv ON mem_messages "
        "USING gin (to_tsvector('simple', text))",
        search_index("mem_messages"),
        # a retrieve / list narrowed to a session or by metadata (ADR-0047) finds its turns
        "CREATE INDEX IF NOT EXISTS mem_messages_session_order ON mem_messages "
        "(agent_id, session_id, occurred_at, recorded_at, message_id)",
        "CREATE INDEX IF NOT EXISTS mem_messages_metadata ON mem_messages USING gin (metadata jsonb_path_ops)",
        stats_index("mem_messages", "message_id", ("occurred_at", "recorded_at")),
    ),
    # replaced by mem_messages_session_order (ADR-0047, 2026-12-04), which leads with its columns
    retired_indexes=("mem_messages_session",),
    embedded_text="text",
    # what is embedded: "Speaker: text" (who said it is part of a turn's meaning; measured
    # in ADR-0009) — the same string as ``embedded_message_text``
    embedded_sql="CASE WHEN {row}.speaker IS NULL OR {row}.speaker = '' THEN {row}.text "
    "ELSE {row}.speaker || ': ' || {row}.text END",
    embedded_python=lambda row: embedded_message_text(row["speaker"], row["text"]),
    # BM25 (projections/search.py): the speaker's name is searchable with the text
    generated=search_columns("coalesce(speaker, '') || ' ' || text"),
    functions=SEARCH_FUNCTIONS,
)


PENDING = Table(
    "mem_extraction_pending",
    columns=(
        ("agent_id", "text NOT NULL"),
        ("message_id", "text NOT NULL"),
        ("record_id", "uuid NOT NULL"),
        ("recorded_at", "timestamptz NOT NULL"),
        ("first_deferred_at", "timestamptz NOT NULL"),
        ("last_deferred_at", "timestamptz NOT NULL"),
        ("deferrals", "integer NOT NULL"),
        ("attempts", "integer NOT NULL"),
        ("reason", "text NOT NULL"),
    ),
    primary_key=("agent_id", "message_id"),
    indexes=(
        "CREATE UNIQUE INDEX IF NOT EXISTS mem_extraction_pending_record "
        "ON mem_extraction_pending (record_id)",
        "CREATE INDEX IF NOT EXISTS mem_extraction_pending_order "
        "ON mem_extraction_pending (agent_id, recorded_at)",
    ),
)

_PENDING_UPSERT = (
    f"INSERT INTO mem_extraction_pending ({', '.join(PENDING.row_columns)}) VALUES ("
    + ", ".join(f"%({c})s" for c in PENDING.row_columns)
    + ") ON CONFLICT (agent_id, message_id) DO UPDATE SET "
    "last_deferred_at = EXCLUDED.last_deferred_at, reason = EXCLUDED.reason, "
    "attempts = mem_extraction_pending.attempts + EXCLUDED.attempts, "
    "deferrals = mem_extraction_pending.deferrals + 1"
)


def _pending_row(e: MessageRecord.ExtractionDeferred) -> dict[str, Any]:
    return {
        "agent_id": e.agent_id, "message_id": e.message_id, "record_id": e.originator_id,
        "recorded_at": e.recorded_at, "first_deferred_at": e.timestamp,
        "last_deferred_at": e.timestamp, "deferrals": 1, "attempts": int(e.attempts),
        "reason": e.reason,
    }


def embedded_message_text(speaker: str | None, text: str) -> str:
    """The string a turn is embedded as (``MESSAGES.embedded_sql`` computes the same in SQL)."""
    return f"{speaker}: {text}" if speaker else text

_MESSAGE_INSERT = (
    f"INSERT INTO mem_messages ({', '.join(MESSAGES.row_columns)}, embedding) VALUES ("
    + ", ".join(f"%({c})s" for c in MESSAGES.row_columns)
    + f", {CACHED_VECTOR_SQL})"
)


def extractor_label(extractor: dict[str, Any] | None) -> str | None:
    """``extractor/model/prompt_version`` (whatever parts are known) for the message row."""
    if not extractor:
        return None
    parts = [extractor.get(k) for k in ("extractor", "model", "prompt_version")]
    return "/".join(str(p) for p in parts if p) or None


def _recorded_row(e: MessageRecord.Recorded) -> dict[str, Any]:
    return {
        "agent_id": e.agent_id, "message_id": e.message_id, "session_id": e.session_id,
        "speaker": e.speaker, "text": e.text, "occurred_at": e.occurred_at,
        "recorded_at": e.timestamp, "metadata": jsonb(e.metadata), "processed": False,
        "extractor": None, "llm_calls": 0, "extraction_error": None,
        "record_id": e.originator_id, "emotion": None, "emotion_intensity": None,
        "emotion_detector": None,
    }


def emotion_values(extraction: dict[str, Any] | None) -> dict[str, Any]:
    """The message row's emotion columns from a stored extraction (absent before issue 26)."""
    raw = (extraction or {}).get("emotion")
    try:
        emotion = ExtractedEmotion.model_validate(raw) if isinstance(raw, dict) else None
    except ValueError:
        emotion = None
    if emotion is None:
        return {"emotion": None, "emotion_intensity": None, "emotion_detector": None}
    return {"emotion": emotion.primary, "emotion_intensity": emotion.intensity_value,
            "emotion_detector": emotion.detector}


def _processed_values(e: MessageRecord.Processed) -> dict[str, Any]:
    return {
        "processed": True, "extractor": extractor_label(e.extractor),
        "llm_calls": int(e.llm_calls or 0), "extraction_error": e.error,
        **emotion_values(e.extraction),
    }


class ConversationView(ReadModelView):
    projection_name = "conversation"
    tables = (MESSAGES, PENDING)

    def texts_to_embed(self, event: Any) -> list[str]:
        if isinstance(event, MessageRecord.Recorded):
            return [embedded_message_text(event.speaker, event.text)]
        return []

    @handles(MessageRecord.Recorded)
    def _recorded(self, curs: Any, e: MessageRecord.Recorded) -> None:
        curs.execute(_MESSAGE_INSERT, {**_recorded_row(e),
                                       **self.vector_params(embedded_message_text(e.speaker, e.text))})

    @handles(AgentMemory.Erased)
    def _erased(self, curs: Any, e: AgentMemory.Erased) -> None:
        drop_agent_rows(curs, e.agent_id, self.tables)

    @handles(MessageRecord.Processed)
    def _processed(self, curs: Any, e: MessageRecord.Processed) -> None:
        v = _processed_values(e)
        curs.execute(
            "UPDATE mem_messages SET processed = %s, extractor = %s, llm_calls = %s, "
            "extraction_error = %s, emotion = %s, emotion_intensity = %s, emotion_detector = %s "
            "WHERE record_id = %s",
            (v["processed"], v["extractor"], v["llm_calls"], v["extraction_error"],
             v["emotion"], v["emotion_intensity"], v["emotion_detector"], e.originator_id),
        )
        curs.execute("DELETE FROM mem_extraction_pending WHERE record_id = %s", (e.originator_id,))

    @handles(MessageRecord.ExtractionDeferred)
    def _extraction_deferred(self, curs: Any, e: MessageRecord.ExtractionDeferred) -> None:
        curs.execute(_PENDING_UPSERT, _pending_row(e))

    @handles(MessageRecord.Reprocessed)
    def _reprocessed(self, curs: Any, e: MessageRecord.Reprocessed) -> None:
        v = emotion_values(e.extraction)  # the newest reading of the message wins
        curs.execute(
            "UPDATE mem_messages SET emotion = %s, emotion_intensity = %s, emotion_detector = %s "
            "WHERE record_id = %s",
            (v["emotion"], v["emotion_intensity"], v["emotion_detector"], e.originator_id),
        )


class ConversationFold(BulkFold):
    def __init__(self) -> None:
        super().__init__()
        self.messages: dict[UUID, dict[str, Any]] = {}
        self.pending: dict[UUID, dict[str, Any]] = {}

    @handles(MessageRecord.Recorded)
    def _recorded(self, e: MessageRecord.Recorded) -> None:
        self.messages[e.originator_id] = _recorded_row(e)

    @handles(MessageRecord.Processed)
    def _processed(self, e: MessageRecord.Processed) -> None:
        row = self.messages.get(e.originator_id)
        if row is not None:
            row.update(_processed_values(e))
        self.pending.pop(e.originator_id, None)

    @handles(MessageRecord.ExtractionDeferred)
    def _extraction_deferred(self, e: MessageRecord.ExtractionDeferred) -> None:
        new = _pending_row(e)
        row = self.pending.get(e.originator_id)
        if row is None:
            self.pending[e.originator_id] = new
        else:  # the same as the view's upsert
            row.update(last_deferred_at=new["last_deferred_at"], reason=new["reason"],
                       attempts=row["attempts"] + new["attempts"], deferrals=row["deferrals"] + 1)

    @handles(MessageRecord.Reprocessed)
    def _reprocessed(self, e: MessageRecord.Reprocessed) -> None:
        row = self.messages.get(e.originator_id)
        if row is not None:
            row.update(emotion_values(e.extraction))

    def texts(self) -> list[str]:
        return [embedded_message_text(m["speaker"], m["text"]) for m in self.messages.values()]

    def rows(self, table: str) -> Iterable[tuple[Any, ...]]:
        if table == PENDING.name:
            columns = PENDING.row_columns  # a computed property: once, not per row
            return [tuple(p[c] for c in columns) for p in self.pending.values()]
        if table != MESSAGES.name:
            raise KeyError(table)
        columns = MESSAGES.row_columns
        return (tuple(m[c] for c in columns) for m in self.messages.values())


READ_MODEL = ReadModel(ConversationView, ConversationFold)


# ----- queries (ADR-0014): what is waiting for an LLM, in per-agent recorded order ----------

_PENDING_COLUMNS = ", ".join(PENDING.row_columns)


def pending_rows(conn: Any, agent_id: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
    """Rows of ``mem_extraction_pending`` (all agents, or one), ordered by agent then by the
    time the message was recorded — the order in which they must be re-extracted."""
    rows = conn.execute(
        f"SELECT {_PENDING_COLUMNS} FROM mem_extraction_pending "
        "WHERE %(a)s::text IS NULL OR agent_id = %(a)s::text "
        "ORDER BY agent_id, recorded_at, message_id LIMIT %(n)s",
        {"a": agent_id, "n": limit},
    ).fetchall()
    return [dict(zip(PENDING.row_columns, row, strict=True)) for row in rows]


def pending_count(conn: Any, agent_id: str | None = None) -> int:
    """How many messages wait for extraction (a gauge: cheap, one index scan)."""
    row = conn.execute(
        "SELECT count(*) FROM mem_extraction_pending WHERE %(a)s::text IS NULL OR agent_id = %(a)s::text",
        {"a": agent_id},
    ).fetchone()
    return int(row[0]) if row else 0
