"""``Memory``'s management methods (issue 11), kept out of ``services/memory/facade.py`` so the
facade stays a wiring module: list/get facts, list entities/agents/messages (read models,
``services/management/queries.py``), delete a fact and forget an agent (events,
``services/management/commands.py``). HTTP, NATS and the CLI call exactly these methods.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from engramdb.domain.agent_id import check_agent_id
from engramdb.services.management import queries
from engramdb.services.management.commands import delete_fact, forget_agent
from engramdb.services.management.erase import erase_agent
from engramdb.services.management.erase_disk import erase_to_disk
from engramdb.services.management.erase_streams import erase_agent_streams
from engramdb.services.management.metadata_filter import MetadataFilter
from engramdb.services.management.models import (
    AgentItem,
    DeleteResult,
    EntityItem,
    EraseResult,
    FactDetail,
    FactFilter,
    FactItem,
    FactStatus,
    ForgetResult,
    MessageFilter,
    MessageItem,
    Page,
    PageParams,
    check_actor,
)
from engramdb.services.management.reprocess import ReprocessResult, reprocess
from engramdb.services.memory.cell import Cell
from engramdb.services.memory.router import merge_agent_pages
from engramdb.services.write.messages import DEFAULT_PREFIX


class ManageMixin:
    """Mixed into ``Memory``; uses the read pool and write pipeline of the agent's cell
    (``cell(agent_id)``, ADR-0028); ``list_agents`` spans every cell."""

    def cell(self, agent_id: str) -> Cell:
        raise NotImplementedError

    @property
    def cells(self) -> list[Cell]:
        raise NotImplementedError

    def list_facts(
        self,
        agent_id: str,
        *,
        status: FactStatus | None = None,
        entity: str | None = None,
        session: str | None = None,
        speaker: str | None = None,
        valid_at: datetime | None = None,
        as_of: datetime | None = None,
        text: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        metadata: dict[str, Any] | None = None,
        category: str | None = None,
    ) -> Page[FactItem]:
        """A page of the agent's facts (active by default), oldest decision first.
        ``metadata``: a filter on the source turns' metadata (``management/metadata_filter``);
        ``category="directive"`` lists the procedural directives (ADR-0045)."""
        flt = FactFilter(
            status=status, entity=entity, session=session, speaker=speaker, valid_at=valid_at,
            as_of=as_of, text=text, limit=limit, cursor=cursor, category=category,
        )
        return queries.list_facts(self.cell(agent_id).pool, agent_id, flt, _metadata(metadata))

    def get_fact(self, agent_id: str, fact_id: str) -> FactDetail:
        """One fact (any status) with its source turns and a link to its history."""
        return queries.get_fact(self.cell(agent_id).pool, agent_id, fact_id)

    def list_entities(
        self, agent_id: str, *, limit: int = 50, cursor: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Page[EntityItem]:
        """``metadata``: only entities an active fact drawn from a matching turn is about."""
        return queries.list_entities(
            self.cell(agent_id).pool, agent_id, PageParams(limit=limit, cursor=cursor),
            _metadata(metadata),
        )

    def list_agents(
        self, *, limit: int = 50, cursor: str | None = None, agents: Sequence[str] | None = None
    ) -> Page[AgentItem]:
        """``agents``: only ids matching these patterns (``team-a:*``, exact ids; ``None``: all)."""
        page = PageParams(limit=limit, cursor=cursor)
        return merge_agent_pages(
            [queries.list_agents(c.pool, page, agents) for c in self.cells], limit
        )

    def list_messages(
        self,
        agent_id: str,
        *,
        session: str | None = None,
        speaker: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Page[MessageItem]:
        flt = MessageFilter(session=session, speaker=speaker, limit=limit, cursor=cursor)
        return queries.list_messages(
            self.cell(agent_id).pool, agent_id, flt, _metadata(metadata)
        )

    def delete_fact(
        self, agent_id: str, fact_id: str, *, actor: str | None = None, via: str = "python"
    ) -> DeleteResult:
        """Retract a fact at a user's request (an event; history keeps it)."""
        check_agent_id(agent_id)
        return delete_fact(self.cell(agent_id).pipeline, agent_id, fact_id, check_actor(actor, via), via)

    def forget_agent(
        self, agent_id: str, *, actor: str | None = None, via: str = "python"
    ) -> ForgetResult:
        """End all the agent's active facts and hide its messages from retrieval (one event)."""
        check_agent_id(agent_id)
        return forget_agent(self.cell(agent_id).pipeline, agent_id, check_actor(actor, via), via)

    def erase_agent(
        self, agent_id: str, *, actor: str | None = None, via: str = "python"
    ) -> EraseResult:
        """Crypto-shred the agent (ADR-0018): destroy its data key, drop its read-model rows
        and vectors; its events stay in the log, unreadable. Irreversible; writes for the
        agent are refused afterwards."""
        check_agent_id(agent_id)
        cell, who = self.cell(agent_id), check_actor(actor, via)
        result = erase_to_disk(  # then rewrite what held its rows (issue 28, ADR-0051)
            cell.pipeline, cell.database.url, cell.schema, agent_id,
            erase=lambda: erase_agent(cell.pipeline, agent_id, who, via),
            wait=lambda position: self._wait_erased(position, agent_id),
        )
        nats_url: str | None = getattr(self, "nats_url", None)
        if nats_url is not None:  # and its turns and dead letters in NATS
            prefix = getattr(self, "subject_prefix", DEFAULT_PREFIX)
            gone = erase_agent_streams(nats_url, prefix, agent_id)
            result = result.model_copy(update={
                "stream_messages_deleted": gone.messages_deleted,
                "dead_letters_deleted": gone.dead_letters_deleted,
            })
        return result

    def _wait_erased(self, position: int, agent_id: str) -> None:
        # a projector that is down: rewrite now; its marker handling drops its rows later
        with contextlib.suppress(TimeoutError):
            self.wait_for_projections(position, timeout=60.0, agent_id=agent_id)  # type: ignore[attr-defined]

    def reprocess(self, agent_id: str, message_id: str | None = None) -> ReprocessResult:
        """Re-extract processed messages (one, or all the agent's in recorded order) with the
        current extractor: the facts they alone produced end (``reprocessed``), the new
        decisions are new events (ADR-0023). Pending ones: ``reprocess_pending``."""
        check_agent_id(agent_id)
        cell = self.cell(agent_id)
        return reprocess(cell.pipeline, cell.pool, agent_id, message_id)


def _metadata(tree: dict[str, Any] | None) -> MetadataFilter | None:
    return None if tree is None else MetadataFilter(tree)
