"""``Memory``'s view of the extraction backlog (ADR-0014), kept out of ``facade.py`` like
``facade_inspect``: the messages an LLM outage left unextracted, their count (the
``/metrics`` gauge) and the round that re-extracts them (``engramdb reprocess --failed``).
"""

from __future__ import annotations

from engramdb.services.management.pending import (
    PendingExtraction,
    ReprocessReport,
    count_pending,
    list_pending,
    reextract_pending,
)
from engramdb.services.memory.cell import Cell


class PendingMixin:
    """Mixed into ``Memory``; one agent's backlog is its cell's, the rest spans cells."""

    def cell(self, agent_id: str) -> Cell:
        raise NotImplementedError

    @property
    def cells(self) -> list[Cell]:
        raise NotImplementedError

    def pending_extractions(
        self, agent_id: str | None = None, limit: int | None = None
    ) -> list[PendingExtraction]:
        """Messages an LLM outage left unextracted (ADR-0014), by agent and recorded order."""
        if agent_id is not None:
            return list_pending(self.cell(agent_id).pool, agent_id, limit)
        found = [p for cell in self.cells for p in list_pending(cell.pool, None, limit)]
        found.sort(key=lambda p: p.agent_id)  # stable: each agent's recorded order stays
        return found if limit is None else found[:limit]

    def pending_count(self, agent_id: str | None = None) -> int:
        """How many messages wait for extraction (gauge-friendly: one indexed count)."""
        if agent_id is not None:
            return count_pending(self.cell(agent_id).pool, agent_id)
        return sum(count_pending(cell.pool, None) for cell in self.cells)

    def reprocess_pending(
        self, agent_id: str | None = None, message_id: str | None = None
    ) -> ReprocessReport:
        """Re-extract pending messages now (what ``engramdb reprocess --failed`` runs).
        Across several cells the report's ``position`` is 0 (positions are per cell)."""
        cells = self.cells if agent_id is None else [self.cell(agent_id)]
        reports = [reextract_pending(c.pipeline, c.pool, agent_id=agent_id, message_id=message_id)
                   for c in cells]
        if len(reports) == 1:
            return reports[0]
        return ReprocessReport(
            extracted=[x for r in reports for x in r.extracted],
            skipped=[x for r in reports for x in r.skipped],
            still_pending=[x for r in reports for x in r.still_pending],
            llm_unavailable=next((r.llm_unavailable for r in reports if r.llm_unavailable), None),
        )
