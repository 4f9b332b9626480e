"""Publisher identities for NATS (ADR-0011): a user that may publish messages, request
retrieve and read the change stream (ADR-0049) only for the agents it was made for.

NATS subjects carry an agent *token* (a hash, ``messages.agent_token``), not the id, so a
publisher is made for exact agent ids (no prefixes, unlike HTTP keys). On the embedded
server the user is added to its generated config and the server reloads it; for an external
NATS, ``permissions_for`` is the block to paste into its ``authorization`` config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engramdb.domain.agent_id import check_agent_id
from engramdb.infra import nats_auth
from engramdb.infra.embedded_nats import ensure_nats, reload_nats
from engramdb.infra.settings import Settings
from engramdb.services.entrypoints.nats.changes import changes_stream_name, changes_subject
from engramdb.services.write.messages import agent_token, message_subject, messages_stream_name


@dataclass(frozen=True)
class Publisher:
    user: str
    password: str
    url: str
    agents: tuple[str, ...]

    @property
    def inbox_prefix(self) -> str:
        return f"_INBOX_{self.user}"


def changes_consumer(user: str, agent_id: str) -> str:
    """The one JetStream consumer name a user may create on the change stream for an agent
    (ADR-0049): permissions cannot prefix-match names, so the name is fixed per user+agent."""
    return f"{user}_{agent_token(agent_id)}"


def change_subjects(user: str, agent: str, prefix: str) -> list[str]:
    """Read ``agent``'s changes and nothing else: create the user's consumer filtered on the
    agent's subject, pull from it and ack it (deliveries arrive on the user's inbox)."""
    stream, name = changes_stream_name(prefix), changes_consumer(user, agent)
    return [f"$JS.API.CONSUMER.CREATE.{stream}.{name}.{changes_subject(agent, prefix)}",
            f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}", f"$JS.API.CONSUMER.INFO.{stream}.{name}",
            f"$JS.ACK.{stream}.{name}.>", f"$JS.API.STREAM.INFO.{stream}"]


def allowed_subjects(agents: list[str], prefix: str, user: str = "{user}") -> list[str]:
    """``user``: the placeholder ``nats_auth`` fills once the user's name is drawn."""
    subjects = []
    for agent in agents:
        subjects += [message_subject(agent, prefix), f"{prefix}.retrieve.{agent_token(agent)}",
                     *change_subjects(user, agent, prefix)]
    return subjects


def permissions_for(user: str, agents: list[str], prefix: str) -> dict[str, Any]:
    return nats_auth.publisher_permissions(
        user, allowed_subjects(agents, prefix, user), messages_stream_name(prefix)
    )


def create_publisher(settings: Settings, agents: list[str]) -> Publisher:
    """Add a publisher user to the embedded server (started if needed) and reload it."""
    if settings.nats_url:
        raise ValueError(
            "ENGRAMDB_NATS_URL is set: add the user to that server's authorization config "
            "(`engramdb nats-user permissions` prints the block)"
        )
    if not agents:
        raise ValueError("name at least one agent (--agent A)")
    for agent in agents:  # '>' or '*' would be a wildcard in its permissions (issue 28)
        check_agent_id(agent)
    prefix = settings.subject_prefix
    handle = ensure_nats(settings.data_dir)
    user, password = nats_auth.new_publisher(
        handle.data_dir, list(agents), allowed_subjects(list(agents), prefix),
        messages_stream_name(prefix),
    )
    reload_nats(handle.data_dir)
    url = nats_auth.with_credentials(handle.url, user, password)  # replaces the service's
    return Publisher(user=user, password=password, url=url, agents=tuple(agents))
