"""``engramdb erase`` reaches the NATS streams too (issue 28 item 2).

Why a helper: the CLI opens ``Memory`` without a broker, so an erase from the command line
deleted nothing from the message and dead-letter streams. This names the deployment's NATS
to the facade (the embedded one is started if it is not running: its store holds the turns).
A NATS that cannot be reached is reported in one line and the rest of the erasure still
runs; the result then says ``stream_messages_deleted: null`` and a re-run finishes it.
"""

from __future__ import annotations

from typing import Any

import typer

from engramdb.infra.database import resolve_nats
from engramdb.infra.settings import load_settings


def attach_nats(memory: Any) -> None:
    settings = load_settings()
    try:
        memory.nats_url = resolve_nats(settings)
    except Exception as exc:  # noqa: BLE001 - one line; the database part still runs
        typer.echo(f"warning: NATS unreachable ({type(exc).__name__}); the agent's turns stay "
                   "in the message stream until its max age — run the erase again later",
                   err=True)
        return
    memory.subject_prefix = settings.subject_prefix
