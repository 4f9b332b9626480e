"""The ingest's AsyncAPI document (``python -m engramdb.services.entrypoints.nats.ingest > docs/asyncapi.json``)."""

from __future__ import annotations

import json
from typing import Any

from faststream.nats import JStream, NatsBroker, PullSub

from engramdb.services.entrypoints.nats.ingest.faststream_app import (
    DEFAULT_DURABLE,
    build_ingest_app,
)
from engramdb.services.jobs.feedback_stream import feedback_stream_name
from engramdb.services.write.messages import (
    DEFAULT_PREFIX,
    DUPLICATE_WINDOW_SEC,
    ConversationMessage,
    deadletter_stream_name,
    deadletter_subject,
    messages_stream_name,
    messages_wildcard,
)


def _document_ingest(broker: NatsBroker, prefix: str) -> None:
    """The ingest channel, for the document only: the app consumes it with partition
    consumers (ADR-0020, not FastStream subscribers); this broker is never started."""

    @broker.subscriber(
        messages_wildcard(prefix),
        stream=JStream(messages_stream_name(prefix), subjects=[messages_wildcard(prefix)],
                       duplicate_window=DUPLICATE_WINDOW_SEC, declare=False),
        durable=DEFAULT_DURABLE,
        pull_sub=PullSub(batch_size=32),
        title="engramdb ingest",
        description="Conversation messages into the write pipeline (ack after save, poison → dead letter).",
    )
    async def ingest(body: Any) -> None:
        """Payload: a ``ConversationMessage`` JSON object (see components); validated here."""


def asyncapi_document(prefix: str = DEFAULT_PREFIX, nats_url: str = "nats://localhost:4222") -> dict[str, Any]:
    """The AsyncAPI 3.0 document of the ingest service, with the message schema filled in
    (the handler takes raw bytes so poison can be dead-lettered, so FastStream cannot infer it)."""
    from faststream.specification import AsyncAPI

    _app, broker = build_ingest_app(nats_url, pipeline_factory=lambda: None, prefix=prefix)  # type: ignore[arg-type,return-value]
    _document_ingest(broker, prefix)
    doc: dict[str, Any] = json.loads(
        AsyncAPI(broker, title="engramdb ingest", version="1.0.0",
                 description="Conversation messages → engramdb write pipeline (NATS JetStream).")
        .to_specification().to_json()
    )
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    message_schema = ConversationMessage.model_json_schema()
    for name in list(schemas):
        if name.startswith("engramdb ingest:"):
            schemas[name] = message_schema | {"title": "ConversationMessage"}
    doc["info"]["x-subject-scheme"] = (
        f"{prefix}.messages.<agent_token>; agent_token = first 16 chars of lower-case base32(sha256(agent_id)); "
        f"the stream stores it as {prefix}.messages.<partition>.<agent_token> (server subject transform, "
        f"partition = partition(ENGRAMDB_INGEST_PARTITIONS, agent_token); consumers {DEFAULT_DURABLE}-p<n>); "
        f"header Nats-Msg-Id = sha256(agent_id NUL message_id)[:40]; stream {messages_stream_name(prefix)} "
        f"(duplicate_window {DUPLICATE_WINDOW_SEC:g}s); dead letters on {deadletter_subject(prefix)} "
        f"in stream {deadletter_stream_name(prefix)}; the subject must be the payload agent_id's (else a dead "
        f"letter); a message_id reused with another text is a dead letter (reason 'message id conflict'); "
        f"retrieve (request/reply, core NATS) on {prefix}.retrieve; prefix = ENGRAMDB_SUBJECT_PREFIX"
    )
    doc["info"]["x-retrieval-feedback"] = (  # ADR-0019: published by retrieve, read by jobs
        f"{prefix}.feedback.<agent_token>: JSON {{agent_id, fact_ids, at}} per retrieve, core "
        f"NATS fire-and-forget, kept by stream {feedback_stream_name(prefix)} (max age "
        "ENGRAMDB_FEEDBACK_RETENTION_DAYS); consumed by `engramdb jobs run --job feedback`"
    )
    return doc
