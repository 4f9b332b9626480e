"""``Memory``'s inspector reads (issue 23, ADR-0044), kept out of ``facade.py`` like
``facade_management``: the agent list with counts, an agent's timeline, a diff between two
instants, the entity graph, patterns, sessions, job runs and erasure markers. The web
inspector calls exactly these (and the management methods), never SQL of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from engramdb.services.management import inspect_queries as q
from engramdb.services.management.audit import extraction_outputs
from engramdb.services.management.dead_letters import latest_dead_letters
from engramdb.services.management.inspect_models import (
    AgentOverview,
    DeadLetterItem,
    EntityGraph,
    ErasureMarker,
    FactsDiff,
    JobRunItem,
    PatternItem,
    SessionItem,
    Timeline,
)
from engramdb.services.management.models import Page, PageParams, encode_cursor
from engramdb.services.memory.cell import Cell


class InspectMixin:
    """Mixed into ``Memory``; per-agent reads go to the agent's cell, the rest span cells."""

    nats_url: str | None

    def cell(self, agent_id: str) -> Cell:
        raise NotImplementedError

    @property
    def cells(self) -> list[Cell]:
        raise NotImplementedError

    def agent_overviews(
        self,
        *,
        search: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        agents: Sequence[str] | None = None,
    ) -> Page[AgentOverview]:
        """Agents (id containing ``search``; only those matching ``agents`` patterns, if
        given) with their counts, by ``agent_id``."""
        page = PageParams(limit=limit, cursor=cursor)
        pages = [q.agent_overviews(c.pool, page, search, patterns=agents) for c in self.cells]
        if len(pages) == 1:
            return pages[0]
        items = sorted((i for p in pages for i in p.items), key=lambda a: a.agent_id)
        more = len(items) > limit or any(p.next_cursor for p in pages)
        kept = items[:limit]
        return Page[AgentOverview](
            items=kept, next_cursor=encode_cursor(kept[-1].agent_id) if more and kept else None
        )

    def agent_overview(self, agent_id: str) -> AgentOverview | None:
        """One agent's exact counts; ``None`` if it has no memory."""
        return q.agent_overview(self.cell(agent_id).pool, agent_id)

    def agent_timeline(self, agent_id: str, limit: int = 200) -> Timeline:
        return q.agent_timeline(self.cell(agent_id).pool, agent_id, limit)

    def facts_diff(self, agent_id: str, t1: datetime, t2: datetime, limit: int = 200) -> FactsDiff:
        return q.facts_diff(self.cell(agent_id).pool, agent_id, t1, t2, limit)

    def entity_graph(self, agent_id: str, center: str | None = None, limit: int = 60) -> EntityGraph:
        return q.entity_graph(self.cell(agent_id).pool, agent_id, center, limit)

    def list_patterns(self, agent_id: str, limit: int = 50) -> list[PatternItem]:
        return q.list_patterns(self.cell(agent_id).pool, agent_id, limit)

    def list_sessions(self, agent_id: str, limit: int = 100) -> list[SessionItem]:
        return q.list_sessions(self.cell(agent_id).pool, agent_id, limit)

    def job_runs(self, limit: int = 100) -> list[JobRunItem]:
        runs = [r for c in self.cells for r in q.list_job_runs(c.pool, limit)]
        return sorted(runs, key=lambda r: r.started_at, reverse=True)[:limit]

    def erasure_markers(self, limit: int = 100) -> list[ErasureMarker]:
        return [m for c in self.cells for m in q.erasure_markers(c.pool, limit)][:limit]

    def erasure_of(self, agent_id: str) -> ErasureMarker | None:
        """The agent's erasure marker (its data key destroyed), or ``None``."""
        return q.erasure_of(self.cell(agent_id).pool, agent_id)

    def extraction_outputs(self, agent_id: str, message_ids: Sequence[str],
                           fact_id: str | None = None) -> dict[str, str]:
        """What the LLM answered when it read each of ``message_ids`` (at most 20), where it
        recorded an answer: the lineage page's "recorded LLM output" — with ``fact_id``, the
        extraction that fact came from (not a later reprocess that ended it)."""
        return extraction_outputs(self.cell(agent_id).app, agent_id, list(message_ids)[:20], fact_id)

    def dead_letters(self, prefix: str, limit: int = 50) -> list[DeadLetterItem] | None:
        """The newest dead letters on ``<prefix>.deadletter.messages``; ``None`` when this
        process knows no NATS (``nats_url`` unset)."""
        if not self.nats_url:
            return None
        return latest_dead_letters(self.nats_url, prefix, limit)
