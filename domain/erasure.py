"""What the rest of the code sees of an erased agent (crypto-shredding, ADR-0018).

Every personal payload in the log is encrypted with its agent's data key; erasing the agent
destroys the key. The stored events stay (ids, versions, topics, notification order), but
their state can no longer be read. The mapper hands such an event to its readers as an
``UndecryptableEvent``: projectors and folds have no handler for it and skip it (the
position is still tracked), while reconstructing an aggregate from it raises
``AgentErasedError`` — the one error callers see, with what to do next.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID


class AgentErasedError(LookupError):
    """The agent was erased: its memory is unreadable by design and its id cannot be reused."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"{what} was erased (its data key is destroyed): nothing of it can be read or "
            "written any more; use a new agent id for new memory"
        )


@dataclass(frozen=True)
class UndecryptableEvent:
    """A stored event whose data key is gone. Carries only what the log stores in clear."""

    originator_id: UUID
    originator_version: int
    topic: str
    timestamp: datetime | None = None

    def mutate(self, aggregate: Any) -> Any:
        """Folding an aggregate through an erased event is impossible: say so."""
        raise AgentErasedError(f"the aggregate {self.originator_id}")
