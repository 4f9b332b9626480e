"""What a valid agent id is: the one rule, used by every surface (write, retrieve, audit).

Why one rule for reads and writes: a written agent id is stored in every event of the agent
and comes back in URL paths (``/v1/agents/{agent_id}/...``), NATS subjects and CLI arguments,
so it is limited to a conservative alphabet. An id outside that alphabet can never hold
memory, so a read with one is a caller's mistake: it gets a clear error naming ``agent_id``
rather than a silent empty answer.
"""

from __future__ import annotations

import re

AGENT_ID_MAX_CHARS = 200
"""Longest agent id any surface accepts."""

AGENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@+\-]{0,199}$"
"""Letters, digits and ``_ . : @ + -``, starting with a letter or digit (pydantic ``pattern``)."""

AGENT_ID_RULE = "letters, digits and _ . : @ + - (starting with a letter or digit), at most 200 characters"
"""The rule in words, for error messages and API descriptions."""

_AGENT_ID = re.compile(AGENT_ID_PATTERN)


def check_agent_id(agent_id: object) -> str:
    """Return ``agent_id`` unchanged if valid; else ``ValueError`` whose message names
    ``agent_id`` and the rule (the HTTP layer maps it to a 422)."""
    if not isinstance(agent_id, str) or not _AGENT_ID.fullmatch(agent_id):
        raise ValueError(f"agent_id {agent_id!r:.60} is not valid: use {AGENT_ID_RULE}")
    return agent_id
