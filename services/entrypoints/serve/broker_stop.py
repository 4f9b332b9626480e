"""Stopping a FastStream NATS broker whatever the connection's state (issue 28 item 3).

Why: ``broker.stop()`` drains the connection, and nats-py refuses to drain one that is
reconnecting (``ConnectionReconnectingError``) or closed — exactly the state after NATS went
away. SIGTERM then ended ``serve`` with exit 1 and a traceback, against ADR-0015's exit 0.
A drain is only worth waiting for while the server is there; otherwise the connection is
closed without one (nothing can be delivered anyway; unacked messages come back to another
consumer after ``ack_wait``) and the reason is logged in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from nats.errors import Error as NatsError

log = logging.getLogger("engramdb.server")


async def stop_broker(broker: Any, what: str, timeout: float = 10.0) -> None:
    """``broker.stop()`` (drain) if it can; else close its connection without draining."""
    try:
        await asyncio.wait_for(broker.stop(), timeout)
        return
    except (NatsError, OSError, TimeoutError) as exc:
        log.warning("%s: NATS unavailable while stopping (%s); closing without a drain",
                    what, type(exc).__name__)
    connection = getattr(broker, "_connection", None)
    if connection is not None:
        with contextlib.suppress(NatsError, OSError, TimeoutError):
            await asyncio.wait_for(connection.close(), timeout)
        broker._connection = None
