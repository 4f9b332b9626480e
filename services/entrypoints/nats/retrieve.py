"""NATS request/reply surface of retrieve (FastStream), subject ``<prefix>.retrieve``.

Request: a JSON ``RetrieveRequest`` (``agent_id``, ``query``, optional ``as_of``,
``wait_for``, ``config_overrides``, ``session_id``, ``metadata`` — ADR-0047). Reply: a JSON ``RetrieveReply`` — ``{"result": {...}}``
on success, ``{"error": "...", "error_type": "validation" | "internal"}`` otherwise, so a
requester always gets an answer instead of waiting for its timeout.

Core NATS (not JetStream): a query is ephemeral, replaying it later has no value. Replicas
share the queue group ``engramdb-retrieve`` so each request is answered once; scaling out is
starting more replicas. The facade is synchronous: calls run on a worker thread, up to
``IN_FLIGHT`` at once per process (a plain subscriber would answer one request at a time);
beyond what the read pool serves at once they queue for it, without deadlock (ADR-0010).

``<prefix>.retrieve.<agent-token>`` answers the same requests for that one agent only (a
request naming another agent gets a ``forbidden`` error): NATS permissions can then let a
publisher identity read exactly its agents' memory (ADR-0011).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
from faststream.nats import NatsBroker, NatsMessage
from pydantic import BaseModel, Field, ValidationError

from engramdb.infra.nats_auth import nats_servers
from engramdb.services.retrieve.config import UnknownConfigKey
from engramdb.services.retrieve.models import RetrieveRequest, RetrieveResult
from engramdb.services.write.messages import agent_token

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "engramdb"
DEFAULT_SUBJECT = f"{DEFAULT_PREFIX}.retrieve"
QUEUE_GROUP = "engramdb-retrieve"
# Requests handled at once per process: 2x the read pool, so the pool stays busy while
# replies are serialised and sent; more would only queue on the pool inside the process.
IN_FLIGHT = 16


class RetrieveReply(BaseModel):
    """Exactly one of ``result`` / ``error`` is set."""

    result: RetrieveResult | None = None
    error: str | None = None
    error_type: str | None = Field(default=None, description="validation | forbidden | internal")


def _error(kind: str, message: str) -> dict[str, Any]:
    return RetrieveReply(error=message, error_type=kind).model_dump(mode="json", exclude_none=True)


def _describe(exc: ValidationError, prefix: str = "") -> str:
    parts = []
    for err in exc.errors(include_url=False, include_context=False, include_input=False):
        loc = ".".join(str(x) for x in err.get("loc", ())) or "request"
        parts.append(f"{prefix}{loc}: {err.get('msg', '')}")
    return "; ".join(parts)


async def handle_request(
    memory: Any, raw: bytes | str, subject_token: str | None = None
) -> dict[str, Any]:
    """Validate, run the retrieve on a thread, and always return a reply dict.
    ``subject_token``: the request came on an agent's own subject; only that agent is served."""
    try:
        payload = json.loads(raw) if isinstance(raw, bytes | str) else raw
        request = RetrieveRequest.model_validate(payload)
    except ValueError as exc:  # JSON errors (also bytes that are not UTF-8) and ValidationError
        text = _describe(exc) if isinstance(exc, ValidationError) else f"invalid JSON: {exc}"
        return _error("validation", text)
    except RecursionError:
        return _error("validation", "invalid JSON: nested too deeply")
    if subject_token is not None and agent_token(request.agent_id) != subject_token:
        return _error("forbidden", "this subject serves another agent's retrieve requests")
    try:
        result = await anyio.to_thread.run_sync(lambda: request.send_to(memory))
    except UnknownConfigKey as exc:
        return _error("validation", str(exc))
    except ValidationError as exc:
        return _error("validation", _describe(exc, "config_overrides."))
    except ValueError as exc:
        return _error("validation", str(exc))
    except Exception as exc:  # the requester gets a reply, the subscriber keeps running
        log.exception("retrieve failed")
        return _error("internal", f"{type(exc).__name__}: {exc}")
    return {"result": result.model_dump(mode="json")}


async def reply_bytes(memory: Any, raw: bytes | str, subject_token: str | None = None) -> bytes:
    """``handle_request``'s reply as JSON bytes, whatever happens: every request is answered
    (a requester waiting for its timeout cannot tell a bad request from a dead service)."""
    try:
        reply = await handle_request(memory, raw, subject_token)
    except BaseException as exc:  # noqa: BLE001 — even a bug here must produce a reply
        if not isinstance(exc, Exception):
            raise
        log.exception("retrieve reply failed")
        reply = _error("internal", f"{type(exc).__name__}: {exc}")
    # ASCII-only JSON: a lone surrogate echoed in an error message cannot break the encoding
    return json.dumps(reply, ensure_ascii=True, default=str).encode("ascii")


def retrieve_subject(prefix: str = DEFAULT_PREFIX) -> str:
    """``<prefix>.retrieve`` (``ENGRAMDB_SUBJECT_PREFIX``)."""
    return f"{prefix}.retrieve"


def register_retrieve(
    broker: NatsBroker, memory: Any, subject: str = DEFAULT_SUBJECT, *, in_flight: int = IN_FLIGHT
) -> Any:
    """Add the retrieve responder to an existing broker (e.g. next to the ingest consumer);
    ``in_flight``: requests handled concurrently by this process."""

    async def raw_decoder(msg: Any) -> Any:
        """Never decode here: a payload FastStream cannot parse must still get a reply."""
        return msg.body

    @broker.subscriber(subject, queue=QUEUE_GROUP, max_workers=in_flight, decoder=raw_decoder)
    async def retrieve_responder(msg: NatsMessage) -> bytes:
        return await reply_bytes(memory, msg.body)

    @broker.subscriber(f"{subject}.*", queue=QUEUE_GROUP, max_workers=in_flight, decoder=raw_decoder)
    async def agent_retrieve_responder(msg: NatsMessage) -> bytes:
        token = msg.raw_message.subject.rsplit(".", 1)[-1]
        return await reply_bytes(memory, msg.body, subject_token=token)

    return retrieve_responder


def create_retrieve_broker(
    memory: Any,
    nats_url: str,
    subject: str = DEFAULT_SUBJECT,
    *,
    in_flight: int = IN_FLIGHT,
    **connect: Any,
) -> NatsBroker:
    """A broker serving only retrieve; run it with ``FastStream(broker)`` or ``await broker.start()``.

    It reconnects forever (nats-py's default gives up after 60 attempts, ~2 minutes, and the
    responder then never answers again); ``connect`` overrides ``NatsBroker`` options;
    ``in_flight``: requests handled concurrently by this process."""
    broker = NatsBroker(nats_servers(nats_url), **{"max_reconnect_attempts": -1, **connect})
    register_retrieve(broker, memory, subject, in_flight=in_flight)
    return broker


async def request_retrieve(
    broker: NatsBroker,
    request: RetrieveRequest | dict[str, Any],
    subject: str = DEFAULT_SUBJECT,
    timeout: float = 10.0,
) -> RetrieveReply:
    """Client helper: send a request and parse the reply."""
    body = (
        request.model_dump(mode="json", exclude_none=True)
        if isinstance(request, BaseModel)
        else request
    )
    reply = await broker.request(json.dumps(body), subject, timeout=timeout)
    return RetrieveReply.model_validate_json(reply.body)
