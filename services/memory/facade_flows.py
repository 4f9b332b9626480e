"""``Memory``'s methods for memory that flows in and out (ADR-0049): facts a client decided
(``add_facts``), an agent's log exported and imported (``export_agent`` / ``import_agent``). Kept out of ``services/memory/facade.py`` so the facade stays a
wiring module; HTTP, NATS, MCP and the CLI call exactly these methods.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from engramdb.domain.agent_id import check_agent_id
from engramdb.services.management import webhook_stats, webhooks
from engramdb.services.management.audit_models import HistoryEntry
from engramdb.services.management.export_log import export_lines
from engramdb.services.management.import_foreign import mem0_facts, transcript_messages
from engramdb.services.management.import_log import ImportRefused, ImportResult, import_export
from engramdb.services.management.webhook_stats import WebhookStats
from engramdb.services.management.webhooks import Webhook
from engramdb.services.memory.cell import Cell
from engramdb.services.write.client_facts import AddFactsRequest, InvalidClientFacts
from engramdb.services.write.client_writer import add_client_facts
from engramdb.services.write.models import WriteResult


def parse_add_facts(agent_id: str, facts: Sequence[Mapping[str, Any] | Any]) -> AddFactsRequest:
    """``facts`` as a request, or ``InvalidClientFacts`` naming the first field at fault."""
    try:
        return AddFactsRequest.model_validate({
            "agent_id": agent_id,
            "facts": [f.model_dump() if hasattr(f, "model_dump") else dict(f) for f in facts],
        })
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".")
        raise InvalidClientFacts(where or "facts", str(first["msg"]).removeprefix("Value error, ")) from None


class FlowsMixin:
    """Mixed into ``Memory``: writes through the pipeline of the agent's cell (ADR-0028)."""

    def cell(self, agent_id: str) -> Cell:
        raise NotImplementedError  # Memory's

    def history(self, agent_id: str, fact_id: str | None = None) -> list[HistoryEntry]:
        raise NotImplementedError  # Memory's

    def add_facts(
        self, agent_id: str, facts: Sequence[Mapping[str, Any] | Any] | AddFactsRequest, *,
        via: str = "add_facts",
    ) -> WriteResult:
        """Record facts the client decided (``subject``, ``text``, optional ``sources``,
        ``valid_from``, ``valid_to``, ``metadata``, ``attribute_key``), reconciled like extracted
        ones (ADD / UPDATE / NOOP), with provenance ``decided_by.extractor = "client"``.
        Refused as a whole with ``InvalidClientFacts`` (a ``ValueError``) naming the fact:
        empty text, a validity out of range or inverted, a source the agent never recorded."""
        if isinstance(facts, AddFactsRequest):
            if facts.agent_id != agent_id:
                raise InvalidClientFacts("agent_id", "the request is for another agent")
            request = facts
        else:
            request = parse_add_facts(agent_id, facts)
        return add_client_facts(self.cell(agent_id).pipeline, request, via=via)

    def export_agent(self, agent_id: str) -> Iterator[str]:
        """The agent's log as ``engramdb-export`` JSONL lines (no newlines), decrypted.
        ``AgentErasedError`` for an erased agent (it exports nothing), ``NotFoundError`` for
        an unknown one — raised before the first line."""
        lines = export_lines(self.cell(agent_id).app, agent_id)
        first = next(lines)  # the checks run before anything is handed out
        yield first
        yield from lines

    def import_agent(self, lines: Iterable[str]) -> ImportResult:
        """Replay an export into this memory: checked whole first (``ImportRefused`` names the
        line), then what is missing inserted in one transaction; twice changes nothing."""
        buffered = list(lines)
        agent = _header_agent(buffered)
        return import_export(self.cell(agent).app, buffered)

    def import_mem0(self, agent_id: str, text: str, *, subject: str = "user") -> list[WriteResult]:
        """A Mem0 ``get_all`` dump as client facts; Mem0 ids already imported are skipped."""
        facts = mem0_facts(text, subject)
        done = {
            (h.decided_by.get("metadata") or {}).get("mem0_id")
            for h in self.history(agent_id) if h.decision in ("ADD", "UPDATE")
        }
        todo = [f for mem0_id, f in facts if mem0_id not in done]
        return [
            add_client_facts(self.cell(agent_id).pipeline,
                             AddFactsRequest(agent_id=agent_id, facts=todo[i:i + 100]), via="import-mem0")
            for i in range(0, len(todo), 100)
        ]

    def import_transcript(
        self, agent_id: str, text: str, *, session_id: str | None = None,
    ) -> list[WriteResult]:
        """An OpenAI-style transcript through the write pipeline, turn by turn."""
        pipeline = self.cell(agent_id).pipeline
        return [pipeline.write(m) for m in transcript_messages(text, agent_id, session_id)]

    # ----- webhooks (the registry lives in the first cell; deployment-wide) -----------------

    def _hooks_conn(self) -> Any:
        first = self.cells[0]
        return first.pool.connection(), first.schema

    @property
    def cells(self) -> list[Cell]:
        raise NotImplementedError  # Memory's

    def add_webhook(self, url: str, *, agent_id: str | None = None, agent_prefix: str | None = None,
                    secret: str | None = None, max_attempts: int = 8) -> Webhook:
        """Register ``url`` for one agent's changes (or those of agents starting with
        ``agent_prefix``); the answer holds the signing secret, no later call does.
        ``WebhookRefused`` for a URL that is not http(s) or points back at this deployment."""
        from engramdb.infra.settings import load_settings

        own = {load_settings().http_port}
        pool_conn, schema = self._hooks_conn()
        with pool_conn as conn:
            return webhooks.register(conn, schema, url, own_ports=own, agent_id=agent_id,
                                     agent_prefix=agent_prefix, secret=secret,
                                     max_attempts=max_attempts)

    def list_webhooks(self, *, with_secrets: bool = False) -> list[Webhook]:
        pool_conn, schema = self._hooks_conn()
        with pool_conn as conn:
            return webhooks.list_hooks(conn, schema, with_secrets=with_secrets)

    def delete_webhook(self, webhook_id: str) -> bool:
        pool_conn, schema = self._hooks_conn()
        with pool_conn as conn:
            return webhooks.delete(conn, schema, webhook_id)

    def webhook_stats(self) -> list[WebhookStats]:
        """Every hook's deliveries so far and its pending changes, as the dispatcher last
        reported them (``/metrics``, ``engramdb status``)."""
        pool_conn, schema = self._hooks_conn()
        with pool_conn as conn:
            return webhook_stats.read_stats(conn, schema)

    def record_webhook_stats(self, deltas: Mapping[str, Mapping[str, int]],
                             pending: Mapping[str, int], errors: Mapping[str, str]) -> None:
        """The dispatcher's report (its ``on_stats``): counters added, pending set."""
        pool_conn, schema = self._hooks_conn()
        with pool_conn as conn:
            webhook_stats.add_stats(conn, schema, deltas, pending, errors)


def _header_agent(lines: list[str]) -> str:
    """The agent id in the header (to pick its cell); the full check is ``parse_export``'s."""
    for number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                agent = json.loads(line).get("agent_id")
            except (ValueError, AttributeError):
                raise ImportRefused(number, "the first line is the engramdb-export header") from None
            if not isinstance(agent, str):
                raise ImportRefused(number, "the header names no agent_id")
            check_agent_id(agent)
            return agent
    raise ImportRefused(0, "the file is empty")
