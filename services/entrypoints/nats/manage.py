"""NATS request/reply surface of memory management: subjects ``<prefix>.manage.<op>``.

``op`` is the ``Memory`` method's name — ``list_facts``, ``get_fact``, ``delete_fact``,
``forget_agent``, ``erase_agent``, ``list_entities``, ``list_agents``, ``list_messages``, ``add_facts`` (ADR-0049) — and the request is a
JSON object with that method's parameters (``agent_id`` plus the same filters as HTTP; unknown
fields are a validation error). Reply: ``{"result": ...}`` or ``{"error": "...",
"error_type": "validation" | "not_found" | "conflict" | "erased" | "internal"}``, so a requester always
gets an answer. Core NATS with the queue group ``engramdb-manage``, beside retrieve.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import anyio
from faststream.nats import NatsBroker, NatsMessage
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engramdb.domain.erasure import AgentErasedError
from engramdb.services.management.models import (
    FactFilter,
    MessageFilter,
    NotActiveError,
    NotFoundError,
    PageParams,
)
from engramdb.services.write.client_facts import AddFactsRequest

log = logging.getLogger(__name__)

SUBJECT_PREFIX = "engramdb.manage"
QUEUE_GROUP = "engramdb-manage"


class _AgentArg(BaseModel):
    agent_id: str = Field(min_length=1, max_length=200)


class _MetadataArg(BaseModel):
    # the filter tree ``list_facts(metadata=...)`` takes (issue 24); a bad tree is a
    # ``validation`` reply naming the operator, before any query runs
    metadata: dict[str, Any] | None = None


class ListFactsRequest(FactFilter, _AgentArg, _MetadataArg):
    pass


class ListMessagesRequest(MessageFilter, _AgentArg, _MetadataArg):
    pass


class ListEntitiesRequest(PageParams, _AgentArg, _MetadataArg):
    pass


class FactRequest(_AgentArg):
    model_config = ConfigDict(extra="forbid")
    fact_id: str = Field(min_length=1, max_length=200)


class DeleteFactRequest(FactRequest):
    actor: str | None = Field(default=None, max_length=200)


class ForgetAgentRequest(_AgentArg):
    model_config = ConfigDict(extra="forbid")
    actor: str | None = Field(default=None, max_length=200)


def _call(method: str, **fixed: Any) -> Callable[[Any, BaseModel], Any]:
    """The ``Memory`` method of that name, called with the request's fields as keywords."""
    return lambda memory, request: getattr(memory, method)(**request.model_dump(), **fixed)


def _add_facts(memory: Any, request: BaseModel) -> Any:
    assert isinstance(request, AddFactsRequest)
    return memory.add_facts(request.agent_id, request, via="nats")


OPS: dict[str, tuple[type[BaseModel], Callable[[Any, BaseModel], Any]]] = {
    "list_facts": (ListFactsRequest, _call("list_facts")),
    "get_fact": (FactRequest, _call("get_fact")),
    "delete_fact": (DeleteFactRequest, _call("delete_fact", via="nats")),
    "forget_agent": (ForgetAgentRequest, _call("forget_agent", via="nats")),
    "erase_agent": (ForgetAgentRequest, _call("erase_agent", via="nats")),
    "list_entities": (ListEntitiesRequest, _call("list_entities")),
    "list_agents": (PageParams, _call("list_agents")),
    "list_messages": (ListMessagesRequest, _call("list_messages")),
    "add_facts": (AddFactsRequest, _add_facts),  # ADR-0049: facts the client decided
}


def _error(kind: str, message: str) -> dict[str, Any]:
    return {"error": message, "error_type": kind}


def _describe(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(x) for x in err.get('loc', ())) or 'request'}: {err.get('msg', '')}"
        for err in exc.errors(include_url=False, include_context=False, include_input=False)
    )


async def handle_manage(memory: Any, op: str, raw: bytes | str) -> dict[str, Any]:
    """Validate, run the ``Memory`` method on a thread, always return a reply dict."""
    if op not in OPS:
        return _error("validation", f"unknown operation {op!r}; one of {', '.join(OPS)}")
    model, call = OPS[op]
    try:
        request = model.model_validate(json.loads(raw or b"{}"))
    except ValidationError as exc:
        return _error("validation", _describe(exc))
    except ValueError as exc:
        return _error("validation", f"invalid JSON: {exc}")
    except RecursionError:
        return _error("validation", "invalid JSON: nested too deeply")
    try:
        result = await anyio.to_thread.run_sync(lambda: call(memory, request))
    except NotFoundError as exc:
        return _error("not_found", str(exc))
    except AgentErasedError as exc:
        return _error("erased", str(exc))
    except NotActiveError as exc:
        return _error("conflict", str(exc))
    except ValueError as exc:
        return _error("validation", str(exc))
    except Exception as exc:  # the requester gets a reply, the subscriber keeps running
        log.exception("manage %s failed", op)
        return _error("internal", f"{type(exc).__name__}: {exc}")
    return {"result": result.model_dump(mode="json")}


def register_manage(broker: NatsBroker, memory: Any, prefix: str = SUBJECT_PREFIX) -> Any:
    """Add the management responder (``<prefix>.*``) to an existing broker."""

    async def raw_decoder(msg: Any) -> Any:
        """Never decode here: a payload FastStream cannot parse must still get a reply."""
        return msg.body

    @broker.subscriber(f"{prefix}.*", queue=QUEUE_GROUP, decoder=raw_decoder)
    async def manage_responder(msg: NatsMessage) -> bytes:
        op = msg.raw_message.subject.rsplit(".", 1)[-1]
        try:
            reply = await handle_manage(memory, op, msg.body)
        except Exception as exc:  # noqa: BLE001 — even a bug here must produce a reply
            log.exception("manage reply failed")
            reply = _error("internal", f"{type(exc).__name__}: {exc}")
        # ASCII-only JSON (ADR-0012): nothing echoed can break the encoding
        return json.dumps(reply, ensure_ascii=True, default=str).encode("ascii")

    return manage_responder


async def request_manage(
    broker: NatsBroker, op: str, body: dict[str, Any], prefix: str = SUBJECT_PREFIX,
    timeout: float = 10.0,
) -> dict[str, Any]:
    """Client helper: send one request and return the reply as a dict."""
    reply = await broker.request(json.dumps(body, default=str), f"{prefix}.{op}", timeout=timeout)
    answer: dict[str, Any] = json.loads(reply.body)
    return answer
