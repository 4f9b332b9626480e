"""``Memory``'s methods for memory that flows in from outside (ADR-0049): facts a client
decided (``add_facts``). Kept out of ``services/memory/facade.py`` so the facade stays a
wiring module; HTTP, NATS, MCP and the CLI call exactly these methods.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

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
