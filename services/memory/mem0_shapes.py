"""What Mem0's words mean in engramdb (issue 24, ADR-0047): scopes, memory ids, filters, and
the dict shapes Mem0 callers read.

Scopes. Mem0 scopes a memory by ``user_id``, ``agent_id`` and ``run_id``; engramdb's unit of
memory (the aggregate, its lock, its key in an API key) is one agent id. The memory a Mem0 call
lands in is the *widest* scope it names: ``user:<user_id>`` if a user is named, else
``agent:<agent_id>``, else ``run:<run_id>`` — so one end user has one memory shared across the
agents and sessions that talk to them (facts about Ana learnt in a support chat are known to
the sales agent), and the prefixes keep a user and an agent of the same name apart. The
narrower ids travel with each turn: ``run_id`` is the turn's session and, with ``agent_id``,
sits in the turn's metadata, which facts inherit — so ``get_all`` narrowed to a run or an agent
is a metadata filter inside SQL.

Ids. Mem0's ``get/update/delete/history`` name a memory by id alone; engramdb's fact ids are
per agent. The Mem0 id is ``<fact_id>.<base64url(memory key)>``: opaque to the client,
path-safe, and it routes to the right agent (and cell) with no lookup table. An id that does
not decode is a 404, as an unknown id is in Mem0.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from engramdb.domain.agent_id import check_agent_id

SCOPE_KEYS = ("user_id", "agent_id", "run_id")
_PREFIX = {"user_id": "user", "agent_id": "agent", "run_id": "run"}


class Mem0Error(Exception):
    """An error Mem0 itself gives (HTTP: ``status`` with ``{"detail": message}``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Unsupported(ValueError):
    """Valid Mem0 that engramdb does not do (yet): a 422 naming what, never a wrong answer."""


@dataclass(frozen=True)
class Scope:
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None

    @classmethod
    def of(cls, values: dict[str, Any]) -> Scope:
        found: dict[str, str] = {}
        for key in SCOPE_KEYS:
            value = values.get(key)
            if value is None:
                continue
            if not isinstance(value, str) or not value.strip():
                raise Mem0Error(400, f"{key} must be a non-empty string")
            found[key] = value
        return cls(**found)

    @property
    def memory_key(self) -> str:
        """The engramdb agent id this scope's memory lives in (the widest scope named)."""
        for key in SCOPE_KEYS:
            value = getattr(self, key)
            if value is not None:
                memory = f"{_PREFIX[key]}:{value}"
                try:
                    return check_agent_id(memory)
                except ValueError as exc:
                    raise Mem0Error(400, f"{key} {value!r:.60} is not usable as a memory id: "
                                    "letters, digits and _ . : @ + - only") from exc
        raise Mem0Error(400, "At least one of user_id, agent_id or run_id must be provided")

    def narrowing(self) -> dict[str, str]:
        """The ids narrower than the memory's own: a metadata filter on the turns."""
        widest = next(k for k in SCOPE_KEYS if getattr(self, k) is not None)
        return {k: getattr(self, k) for k in SCOPE_KEYS
                if k != widest and getattr(self, k) is not None}

    def fields(self) -> dict[str, str | None]:
        return {k: getattr(self, k) for k in SCOPE_KEYS}


def scope_of_memory_key(memory_key: str) -> Scope:
    kind, _, value = memory_key.partition(":")
    key = next((k for k, p in _PREFIX.items() if p == kind), None)
    return Scope(**{key: value}) if key else Scope()


def mem0_id(fact_id: str, memory_key: str) -> str:
    token = base64.urlsafe_b64encode(memory_key.encode()).decode().rstrip("=")
    return f"{fact_id}.{token}"


def parse_mem0_id(memory_id: str) -> tuple[str, str]:
    """(fact_id, memory key); ``Mem0Error(404)`` for an id engramdb never gave out."""
    fact_id, dot, token = memory_id.partition(".")
    try:
        if not (fact_id and dot and token):
            raise ValueError
        key = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        return fact_id, check_agent_id(key)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise Mem0Error(404, f"Memory with id {memory_id!r:.80} not found") from None


def split_filters(filters: dict[str, Any] | None, top: dict[str, Any]) -> tuple[Scope, dict[str, Any] | None]:
    """Mem0 ``filters`` (and top-level ids, as the OSS verbs take) → (scope, metadata filter).

    Scope ids may sit at the top of ``filters`` or in a top-level ``AND`` list, as equality;
    ``metadata`` holds a metadata filter (``management/metadata_filter.py``). The rest of
    Mem0's filter language (dates, categories, OR across scopes) is ``Unsupported``."""
    ids: dict[str, Any] = {k: top[k] for k in SCOPE_KEYS if top.get(k) is not None}
    metadata: list[dict[str, Any]] = []
    pending = [filters or {}]
    while pending:
        node = pending.pop()
        if not isinstance(node, dict):
            raise Mem0Error(400, "filters must be a JSON object")
        for key, value in node.items():
            if key in SCOPE_KEYS:
                if isinstance(value, dict) and set(value) == {"eq"}:
                    value = value["eq"]
                if not isinstance(value, str) or value == "*":
                    raise Unsupported(f"filters.{key}: only equality to one id is supported")
                if ids.get(key, value) != value:
                    raise Mem0Error(400, f"{key} given twice with different values")
                ids[key] = value
            elif key == "AND" and isinstance(value, list):
                pending.extend(value)
            elif key == "metadata" and isinstance(value, dict):
                metadata.append(value)
            else:
                raise Unsupported(f"filters.{key}: engramdb filters by user_id, agent_id, run_id "
                                  "and metadata (eq, ne, in, nin, contains, AND/OR/NOT)")
    scope = Scope.of(ids)
    narrowing = [{k: v} for k, v in scope.narrowing().items()] if ids else []
    tree = metadata + narrowing
    return scope, ({"AND": tree} if tree else None)


def iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def memory_item(
    *, fact_id: str, memory_key: str, text: str, metadata: dict[str, Any],
    created_at: datetime | None, updated_at: datetime | None, score: float | None,
    provenance: dict[str, Any],
) -> dict[str, Any]:
    """One memory as Mem0 shapes it, plus ``provenance``: where engramdb got it from."""
    own = {k: v for k, v in metadata.items() if k not in SCOPE_KEYS}
    scope = {**scope_of_memory_key(memory_key).fields(),
             **{k: metadata[k] for k in SCOPE_KEYS if isinstance(metadata.get(k), str)}}
    return {
        "id": mem0_id(fact_id, memory_key),
        "memory": text,
        "hash": hashlib.md5(text.encode()).hexdigest(),  # noqa: S324 — Mem0's field, not security
        "metadata": own,
        "score": score,
        "created_at": iso(created_at),
        "updated_at": iso(updated_at or created_at),
        **scope,
        "provenance": {"engramdb_fact_id": fact_id, "engramdb_agent_id": memory_key, **provenance},
    }
