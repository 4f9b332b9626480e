"""Memory from other tools (ADR-0049): a Mem0 ``get_all`` dump and an OpenAI-style chat
transcript, read into what this memory's own surfaces take.

Why these two paths differ:
- A **Mem0 dump** holds facts already decided (Mem0's ``memory`` strings), so they become
  client facts (``add_facts``), with the Mem0 id, hash and metadata kept in each fact's
  provenance and ``created_at`` as its valid time. Re-running skips the Mem0 ids already
  imported (read from the agent's history), so a second import changes nothing and an import
  that stopped resumes; batches are ``add_facts``' 100 facts, each all or nothing.
- A **transcript** holds turns, so they go through the normal write pipeline (extraction
  included), one ``write`` per message, oldest first. Message ids derive from the file's
  digest and the turn's index: a second import is all duplicates, an interrupted one resumes.

Both are checked whole before the first write; a refusal names the line (JSONL) or the item
(a JSON array: ``item 3``) and what is wrong with it.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from engramdb.services.write.client_facts import ClientFact
from engramdb.services.write.messages import ConversationMessage

ROLES = ("user", "assistant", "system", "tool")


class ForeignImportRefused(ValueError):
    """``where``: ``line 4`` or ``item 4``; ``reason``: what is wrong there."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


def _items(text: str, list_key: str | None = None) -> list[tuple[str, Any]]:
    """(where, item) from a JSON document (array, or ``{list_key: [...]}``) or JSONL."""
    stripped = text.strip()
    if not stripped:
        raise ForeignImportRefused("line 1", "the file is empty")
    try:
        whole = json.loads(stripped)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, dict) and list_key is not None and isinstance(whole.get(list_key), list):
        whole = whole[list_key]
    if isinstance(whole, list):
        return [(f"item {i}", item) for i, item in enumerate(whole)]
    out: list[tuple[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                out.append((f"line {number}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ForeignImportRefused(f"line {number}", f"not JSON ({exc.msg})") from None
    return out


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])


def mem0_facts(text: str, default_subject: str) -> list[tuple[str, ClientFact]]:
    """(Mem0 id, fact) per memory of a ``get_all`` dump, or ``ForeignImportRefused``."""
    out: list[tuple[str, ClientFact]] = []
    for where, item in _items(text, "results"):
        if not isinstance(item, dict) or not isinstance(item.get("memory"), str):
            raise ForeignImportRefused(where, "a Mem0 memory is an object with a 'memory' string")
        mem0_id = str(item.get("id") or hashlib.sha256(item["memory"].encode()).hexdigest()[:32])
        metadata = {"mem0_id": mem0_id, "mem0_hash": item.get("hash"),
                    "mem0_metadata": item.get("metadata") or {}}
        try:
            fact = ClientFact(subject=str(item.get("user_id") or default_subject), text=item["memory"],
                              valid_from=item.get("created_at"), metadata=metadata)
        except ValidationError as exc:
            raise ForeignImportRefused(where, _first_error(exc)) from None
        out.append((mem0_id, fact))
    return out


def transcript_messages(text: str, agent_id: str, session_id: str | None) -> list[ConversationMessage]:
    """The transcript's turns as messages (system prompts skipped: nobody said them)."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    out: list[ConversationMessage] = []
    for index, (where, item) in enumerate(_items(text, "messages")):
        if not isinstance(item, dict) or item.get("role") not in ROLES:
            raise ForeignImportRefused(where, f"a message is an object with a role in {ROLES}")
        if item["role"] == "system":
            continue
        content = item.get("content")
        if isinstance(content, list):  # OpenAI content parts: the text ones
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        at = item.get("timestamp") or item.get("created_at")
        if isinstance(at, int | float):
            at = datetime.fromtimestamp(at).astimezone()
        try:
            fields: dict[str, Any] = {
                "agent_id": agent_id, "message_id": f"transcript-{digest}-{index}",
                "session_id": session_id, "speaker": str(item.get("name") or item["role"]),
                "text": content, "metadata": {"imported_from": "transcript", "role": item["role"]},
            }
            if at is not None:
                fields["occurred_at"] = at
            out.append(ConversationMessage.model_validate(fields))
        except (ValidationError, TypeError) as exc:
            reason = _first_error(exc) if isinstance(exc, ValidationError) else str(exc)
            raise ForeignImportRefused(where, reason) from None
    return out
