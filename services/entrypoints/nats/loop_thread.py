"""An asyncio loop on a daemon thread of its own, for the NATS followers that run beside
``serve``'s other work (the change publisher, the webhook dispatcher: ADR-0049).

Why a thread with its own loop: they must never share a loop (or a connection) with ingest or
retrieve, so a slow broker or a slow receiver delays only them. ``stop()`` sets an event the
loop checks and joins the thread; ``_run`` is the subclass's coroutine.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Self


class LoopThread:
    """``start()`` runs ``_run()`` in ``asyncio.run`` on a daemon thread named ``name``."""

    thread_name = "engramdb-loop"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Self:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()),
                                        name=self.thread_name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    async def _run(self) -> None:
        raise NotImplementedError
