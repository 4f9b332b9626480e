"""What a valid agent id is: the one home for the rule, used by every surface.

Why two strengths: a *written* agent id is stored in every event of the agent and comes back
in URL paths (``/v1/agents/{agent_id}/...``) and CLI arguments, so writes accept only a
conservative alphabet. A *read* only has to be storable text: a retrieve for an agent that was
never written simply finds nothing. Tightening reads to the write rule would turn today's
empty answers into errors, so both rules stay, side by side, and are kept exactly as the surfaces have always applied them.
"""

from __future__ import annotations

AGENT_ID_MAX_CHARS = 200
"""Longest agent id a message (write) or a retrieve request (HTTP/NATS read) may carry."""

AGENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@+\-]{0,199}$"
"""Write rule: letters, digits and ``_ . : @ + -``, starting with a letter or digit."""

READ_AGENT_ID_PATTERN = r"^[^\x00]+$"
"""Read rule on the wire (``RetrieveRequest``): any non-empty text without NUL."""

LIBRARY_READ_AGENT_ID_MAX_CHARS = 512
"""Read rule for in-process callers of ``Retriever.retrieve`` (no pydantic model in front)."""


def check_read_agent_id(agent_id: str) -> str:
    """Validate an agent id given to the library's retrieve; returns it unchanged.

    Raises ``ValueError`` whose message names ``agent_id`` (the HTTP layer maps on that)."""
    if not isinstance(agent_id, str) or not agent_id.strip():
        raise ValueError("agent_id must be a non-empty string")
    if "\x00" in agent_id or len(agent_id) > LIBRARY_READ_AGENT_ID_MAX_CHARS:
        raise ValueError(
            f"agent_id must not contain NUL and must be at most {LIBRARY_READ_AGENT_ID_MAX_CHARS} characters"
        )
    return agent_id
