"""``Memory``'s direct edits (issue 24): rewrite a fact, record a message without extraction.

Kept beside ``facade_management`` (one job per module): both are events through the agent's
cell's write pipeline (``services/management/edit.py`` says why each is the event it is). The
Mem0 surface's ``update`` and ``add(infer=False)`` call exactly these.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from engramdb.domain.agent_id import check_agent_id
from engramdb.services.management.edit import update_fact_text
from engramdb.services.management.models import UpdateResult, check_actor
from engramdb.services.memory.cell import Cell
from engramdb.services.write.models import WriteResult


class EditMixin:
    """Mixed into ``Memory``; uses the write pipeline of the agent's cell."""

    def cell(self, agent_id: str) -> Cell:
        raise NotImplementedError

    if TYPE_CHECKING:  # ``Memory.write``, which ``record_message`` is one form of
        def write(
            self, agent_id: str, text: str, *, speaker: str | None = None,
            session_id: str | None = None, occurred_at: datetime | None = None,
            message_id: str | None = None, metadata: dict[str, Any] | None = None,
            dry_run: bool = False, infer: bool = True,
        ) -> WriteResult: ...

    def update_fact(
        self, agent_id: str, fact_id: str, text: str, *, actor: str | None = None,
        via: str = "python",
    ) -> UpdateResult:
        """Rewrite an active fact: a new fact saying ``text`` supersedes it (history keeps both)."""
        check_agent_id(agent_id)
        return update_fact_text(
            self.cell(agent_id).pipeline, agent_id, fact_id, text, check_actor(actor, via), via
        )

    def record_message(
        self,
        agent_id: str,
        text: str,
        *,
        speaker: str | None = None,
        session_id: str | None = None,
        occurred_at: datetime | None = None,
        message_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> WriteResult:
        """Record one message and decide nothing (no extraction, no LLM call): it is listed
        and retrievable as a conversation turn; idempotent on ``message_id``. The same as
        ``write(..., infer=False)`` (one path, ADR-0049), kept for the Mem0 surface."""
        return self.write(agent_id, text, speaker=speaker, session_id=session_id,
                          occurred_at=occurred_at, message_id=message_id, metadata=metadata,
                          infer=False)
