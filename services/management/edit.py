"""A change a caller asks for directly, as an event like every other change (issue 24):
rewrite a fact's text. (Recording a message without extraction, Mem0's ``add(infer=False)``,
is the write pipeline's own ``infer=False`` path, ``WritePipeline._store_only``: one path for
every surface, ADR-0049.)

Why an edit is a ``FactUpdated`` and not a changed row: the log is the source of truth and is
never edited (ADR-0016). A person (or a Mem0 client's ``update``) rewriting "Ana lives in
Recife" to "Ana lives in Olinda" is exactly what an extraction's UPDATE is — a new fact that
supersedes the old one — decided by a user instead of an extractor. The new fact keeps the old
one's subject, attribute, category and sources (the turns it rests on did not change; the
correction is the user's, named in ``decided_by``), so history, as-of and retrieval treat it
as any supersession.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from engramdb.domain.aggregate import AgentMemory
from engramdb.domain.payloads import FactPayload
from engramdb.services.management.commands import USER_REQUEST, _command
from engramdb.services.management.models import NotActiveError, NotFoundError, UpdateResult
from engramdb.services.write.pipeline import WritePipeline


def _payload_of(pipeline: WritePipeline, agent_id: str, fact_id: str) -> FactPayload:
    """The stored decision that created ``fact_id`` (the log, not a read model that may lag)."""
    fields = FactPayload.__dataclass_fields__
    for event in reversed(pipeline.app.agent_events(agent_id)):
        if getattr(event, "fact_id", None) == fact_id and all(hasattr(event, f) for f in fields):
            return FactPayload(**{f: getattr(event, f) for f in fields})
    raise NotFoundError(f"agent {agent_id!r} has no fact {fact_id!r}")


def update_fact_text(
    pipeline: WritePipeline, agent_id: str, fact_id: str, text: str, actor: str, via: str
) -> UpdateResult:
    """Supersede active ``fact_id`` by a fact saying ``text``.
    ``NotFoundError`` if the agent never had it, ``NotActiveError`` if it already ended,
    ``ValueError`` for an empty text."""
    text = text.strip()
    if not text:
        raise ValueError("text must not be empty")

    def act(memory: AgentMemory) -> str:
        old = _payload_of(pipeline, agent_id, fact_id)
        if not memory.is_active(fact_id):
            raise NotActiveError(
                f"fact {fact_id!r} of agent {agent_id!r} is no longer active (see its history)"
            )
        new = FactPayload(
            **{**old.payload_fields(), "fact_id": "f_" + uuid.uuid4().hex[:20], "text": text,
               "valid_from": datetime.now(UTC),
               "decided_by": {"by": "user", "actor": actor, "via": via, "reason": USER_REQUEST}},
        )
        memory.update_fact(fact_id, new)
        return new.fact_id

    position, new_id = _command(pipeline, agent_id, act)
    return UpdateResult(
        agent_id=agent_id, fact_id=fact_id, new_fact_id=str(new_id), text=text, position=position
    )
