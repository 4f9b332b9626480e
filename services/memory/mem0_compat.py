"""Mem0's verbs over ``Memory`` (issue 24, ADR-0047): ``add``, ``search``, ``get_all``,
``get``, ``update``, ``delete``, ``delete_all``, ``history``, with Mem0's arguments and result
shapes, so code written for ``mem0.Memory`` runs on engramdb by changing its import.

Every verb is a call of the facade's public methods: nothing here reaches a read model or the
log directly, so the Mem0 surface cannot drift from engramdb's own (same events, same
isolation, same determinism). ``update`` and ``delete`` are events (a user's ``FactUpdated`` /
``FactRetracted``); ``add(infer=False)`` records the turns and decides nothing. What the
words mean here (scopes, ids, filters) is in ``mem0_shapes``.

Where engramdb differs, said rather than faked: a Mem0 memory that was updated gets a new
engramdb fact (the old one is superseded, history keeps both), so ``update`` returns the new
id; ``get``, ``update``, ``delete`` and ``history`` on the old id follow the supersession to
the current fact. ``search`` and ``get_all`` narrowed below the memory's own scope (a run, an
agent inside a user, metadata) filter inside SQL: ``get_all`` in the list query, ``search`` in
every candidate query of retrieve (``Memory.retrieve(metadata=...)``).
"""

from __future__ import annotations

from typing import Any

from engramdb.services.management.models import FactDetail, NotActiveError, NotFoundError
from engramdb.services.memory.facade import Memory
from engramdb.services.memory.mem0_shapes import (
    SCOPE_KEYS,
    Mem0Error,
    Scope,
    Unsupported,
    iso,
    mem0_id,
    memory_item,
    parse_mem0_id,
    split_filters,
)

MAX_CHAIN = 64  # supersessions followed from an old id to the current fact
MAX_MESSAGES = 100
_ROLES = ("user", "assistant", "system")


class Mem0Memory:
    """Mem0's ``Memory`` API on an open engramdb ``Memory``. ``actor`` names who asks in the
    events ``update``/``delete`` write (the HTTP surface passes the API key's id)."""

    def __init__(self, memory: Memory, *, actor: str | None = None, via: str = "mem0") -> None:
        self.memory = memory
        self.actor = actor
        self.via = via

    # ----- add ------------------------------------------------------------------------------

    def add(
        self,
        messages: str | dict[str, Any] | list[dict[str, Any]],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        infer: bool = True,
    ) -> dict[str, Any]:
        """Write the turns; with ``infer`` (default) engramdb extracts and decides, and the
        results are the decisions (``ADD``/``UPDATE``/``DELETE``); without, turns are recorded
        only and listed under ``recorded``."""
        turns = _turns(messages)
        scope = Scope.of({"user_id": user_id, "agent_id": agent_id, "run_id": run_id})
        key = scope.memory_key
        if metadata is not None and not isinstance(metadata, dict):
            raise Mem0Error(400, "metadata must be a JSON object")
        clash = sorted(set(metadata or {}) & set(SCOPE_KEYS))
        if clash:
            raise Mem0Error(400, f"metadata must not hold {', '.join(clash)}: pass them as ids")
        turn_metadata = {**(metadata or {}), **{k: v for k, v in scope.fields().items() if v}}
        results: list[dict[str, Any]] = []
        recorded: list[dict[str, Any]] = []
        last_position = 0
        for role, content, name in turns:
            speaker = name or _default_speaker(role, scope)
            kwargs: dict[str, Any] = {"speaker": speaker, "session_id": run_id,
                                      "metadata": dict(turn_metadata)}
            if infer and role != "system":
                written = self.memory.write(key, content, **kwargs)
                results.extend(_decision_results(written.decisions, key))
            else:
                written = self.memory.record_message(key, content, **kwargs)
                recorded.append({"message_id": written.message_id, "event": "RECORDED",
                                 "position": written.position})
            last_position = written.position
        if last_position:  # read-your-writes: a get_all right after sees what add decided
            self.memory.wait_for_projections(last_position, agent_id=key)
        out: dict[str, Any] = {"results": results, "position": last_position}
        if recorded:
            out["recorded"] = recorded
        return out

    # ----- reads ------------------------------------------------------------------------------

    def search(
        self, query: str, *, filters: dict[str, Any] | None = None, top_k: int = 10,
        threshold: float | None = None, **ids: Any,
    ) -> dict[str, Any]:
        """The memories that matter for ``query`` (engramdb's retrieve), best first."""
        if not isinstance(query, str) or not query.strip():
            raise Mem0Error(400, "Invalid query: cannot be empty or whitespace-only.")
        if not isinstance(top_k, int) or not 1 <= top_k <= 100:
            raise Mem0Error(400, "top_k must be an integer from 1 to 100")
        scope, narrowing = split_filters(filters, _ids(ids))
        key = scope.memory_key
        found = self.memory.retrieve(key, query, config_overrides={"topk_facts": top_k}, metadata=narrowing)
        results = []
        for fact in found.facts[:top_k]:
            if threshold is not None and fact.score < threshold:
                continue
            detail = self._detail(key, fact.fact_id)
            item = self._item(key, detail, score=fact.score)
            item["provenance"]["scores"] = dict(fact.scores)
            results.append(item)
        return {"results": results}

    def get_all(
        self, *, filters: dict[str, Any] | None = None, top_k: int = 100, **ids: Any
    ) -> dict[str, Any]:
        """The memory's active facts, oldest first, filtered in SQL (scopes and metadata)."""
        if not isinstance(top_k, int) or top_k < 1:
            raise Mem0Error(400, "top_k must be a positive integer")
        scope, narrowing = split_filters(filters, _ids(ids))
        key = scope.memory_key
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        while len(items) < top_k:
            page = self.memory.list_facts(key, metadata=narrowing, cursor=cursor,
                                          limit=min(500, top_k - len(items)))
            items.extend(
                memory_item(fact_id=f.fact_id, memory_key=key, text=f.text, metadata=f.metadata,
                            created_at=f.recorded_at, updated_at=f.recorded_at, score=None,
                            provenance=_provenance(f))
                for f in page.items
            )
            cursor = page.next_cursor
            if cursor is None:
                break
        return {"results": items}

    def get(self, memory_id: str) -> dict[str, Any]:
        key, detail = self._current(memory_id)
        return self._item(key, detail, score=None)

    def history(self, memory_id: str) -> list[dict[str, Any]]:
        """The memory's decisions, oldest first (Mem0's ``ADD``/``UPDATE``/``DELETE``), each
        with the turn that caused it and who decided."""
        fact_id, key = parse_mem0_id(memory_id)
        entries = self.memory.history(key, fact_id)
        if not entries:
            raise Mem0Error(404, f"Memory with id {memory_id!r:.80} not found")
        texts: dict[str, str] = {}
        out: list[dict[str, Any]] = []
        for entry in entries:
            if entry.decision not in ("ADD", "UPDATE", "DELETE", "FORGET"):
                continue
            old = texts.get(entry.target_fact_id or "") if entry.target_fact_id else None
            if entry.fact_id and entry.text is not None:
                texts[entry.fact_id] = entry.text
            target = entry.fact_id or entry.target_fact_id or fact_id
            out.append({
                "id": f"{target}@{entry.version}",
                "memory_id": mem0_id(target, key),
                "old_memory": old,
                "new_memory": entry.text if entry.decision in ("ADD", "UPDATE") else None,
                "event": "DELETE" if entry.decision == "FORGET" else entry.decision,
                "created_at": iso(entry.recorded_at),
                "updated_at": None,
                "is_deleted": entry.decision in ("DELETE", "FORGET"),
                "actor_id": entry.decided_by.get("actor"),
                "role": entry.decided_by.get("by"),
                "provenance": {"message_id": entry.message_id, "message_text": entry.message_text,
                               "decided_by": entry.decided_by, "reason": entry.reason,
                               "engramdb_event": entry.event},
            })
        return out

    # ----- changes (events) -------------------------------------------------------------------

    def update(self, memory_id: str, data: str | None = None, *, text: str | None = None,
               metadata: dict[str, Any] | None = None) -> dict[str, Any]:
        """Rewrite the memory (a user's ``FactUpdated``); returns the new memory."""
        new_text = text if text is not None else data
        if metadata is not None:
            raise Unsupported("updating a memory's metadata is not supported: metadata comes "
                              "from the turns the memory rests on")
        if not isinstance(new_text, str) or not new_text.strip():
            raise Mem0Error(400, "text must be a non-empty string")
        key, detail = self._current(memory_id)
        done = self.memory.update_fact(key, detail.fact_id, new_text, actor=self.actor, via=self.via)
        self.memory.wait_for_projections(done.position, agent_id=key)
        item = self._item(key, self._detail(key, done.new_fact_id), score=None)
        return {"message": "Memory updated successfully!", **item,
                "previous_id": mem0_id(detail.fact_id, key)}

    def delete(self, memory_id: str) -> dict[str, Any]:
        key, detail = self._current(memory_id)
        try:
            done = self.memory.delete_fact(key, detail.fact_id, actor=self.actor, via=self.via)
        except (NotFoundError, NotActiveError):
            raise Mem0Error(404, f"Memory with id {memory_id!r:.80} not found") from None
        self.memory.wait_for_projections(done.position, agent_id=key)  # read-your-writes
        return {"message": "Memory deleted successfully!", "position": done.position}

    def delete_all(self, *, user_id: str | None = None, agent_id: str | None = None,
                   run_id: str | None = None) -> dict[str, Any]:
        """Forget the whole memory (one ``Forgotten`` event), or, narrowed to a run or an
        agent inside a user's memory, delete the memories resting on those turns."""
        scope = Scope.of({"user_id": user_id, "agent_id": agent_id, "run_id": run_id})
        key = scope.memory_key
        narrowing = scope.narrowing()
        try:
            if not narrowing:
                done = self.memory.forget_agent(key, actor=self.actor, via=self.via)
                self.memory.wait_for_projections(done.position, agent_id=key)
            else:
                tree = {"AND": [{k: v} for k, v in narrowing.items()]}
                while page := self.memory.list_facts(key, metadata=tree, limit=500).items:
                    last = 0
                    for fact in page:
                        last = self.memory.delete_fact(key, fact.fact_id, actor=self.actor,
                                                       via=self.via).position
                    self.memory.wait_for_projections(last, agent_id=key)
        except NotFoundError:
            pass  # nothing was ever stored there: Mem0 answers the same
        return {"message": "Memories deleted successfully!"}

    # ----- helpers -----------------------------------------------------------------------------

    def _detail(self, key: str, fact_id: str) -> FactDetail:
        try:
            return self.memory.get_fact(key, fact_id)
        except NotFoundError:
            raise Mem0Error(404, f"Memory {fact_id!r:.80} not found") from None

    def _current(self, memory_id: str) -> tuple[str, FactDetail]:
        """The fact a Mem0 id names now: its own, or what superseded it (``update``)."""
        fact_id, key = parse_mem0_id(memory_id)
        detail = self._detail(key, fact_id)
        for _ in range(MAX_CHAIN):
            if detail.status != "superseded" or not detail.superseded_by:
                break
            detail = self._detail(key, detail.superseded_by)
        if detail.status != "active":
            raise Mem0Error(404, f"Memory with id {memory_id!r:.80} not found ({detail.status})")
        return key, detail

    def _item(self, key: str, detail: FactDetail, *, score: float | None) -> dict[str, Any]:
        item = memory_item(
            fact_id=detail.fact_id, memory_key=key, text=detail.text, metadata=detail.metadata,
            created_at=detail.recorded_at, updated_at=detail.recorded_at, score=score,
            provenance=_provenance(detail),
        )
        item["provenance"]["sources"] = [
            {"message_id": s.message_id, "text": s.text, "speaker": s.speaker,
             "session_id": s.session_id, "occurred_at": iso(s.occurred_at)}
            for s in detail.sources
        ]
        return item


def _provenance(fact: Any) -> dict[str, Any]:
    return {
        "source_message_ids": list(fact.source_message_ids), "entity_key": fact.entity_key,
        "category": fact.category, "confidence": fact.confidence, "status": fact.status,
        "valid_from": iso(fact.valid_from), "supersedes": fact.supersedes_fact_id,
        "decided_by": fact.decided_by, "speaker": fact.speaker,
    }


def _ids(values: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(values) - set(SCOPE_KEYS))
    if unknown:
        raise Unsupported(f"unsupported argument(s): {', '.join(unknown)}")
    return values


def _default_speaker(role: str, scope: Scope) -> str:
    if role == "user":
        return scope.user_id or "user"
    if role == "assistant":
        return scope.agent_id or "assistant"
    return "system"


def _turns(messages: Any) -> list[tuple[str, str, str | None]]:
    """Mem0's accepted forms: a string, a message dict, a list of them."""
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    elif isinstance(messages, dict):
        messages = [messages]
    if not isinstance(messages, list) or not messages:
        raise Mem0Error(400, "messages must be a non-empty string, dict or list of dicts")
    if len(messages) > MAX_MESSAGES:
        raise Mem0Error(400, f"at most {MAX_MESSAGES} messages per add")
    turns = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise Mem0Error(400, f"messages[{i}] must be an object with role and content")
        role, content, name = message.get("role", "user"), message.get("content"), message.get("name")
        if role not in _ROLES:
            raise Mem0Error(400, f"messages[{i}].role must be one of {', '.join(_ROLES)}")
        if not isinstance(content, str) or not content.strip():
            raise Mem0Error(400, f"messages[{i}].content must be a non-empty string")
        if name is not None and not isinstance(name, str):
            raise Mem0Error(400, f"messages[{i}].name must be a string")
        turns.append((role, content, name))
    return turns


def _decision_results(decisions: list[Any], key: str) -> list[dict[str, Any]]:
    out = []
    for d in decisions:
        if d.kind == "ADD" and d.fact_id:
            out.append({"id": mem0_id(d.fact_id, key), "memory": d.text, "event": "ADD"})
        elif d.kind == "UPDATE" and d.fact_id:
            out.append({"id": mem0_id(d.fact_id, key), "memory": d.text, "event": "UPDATE",
                        "previous_id": mem0_id(d.target_fact_id, key) if d.target_fact_id else None})
        elif d.kind == "DELETE" and d.target_fact_id:
            out.append({"id": mem0_id(d.target_fact_id, key), "memory": d.text, "event": "DELETE"})
    return out
