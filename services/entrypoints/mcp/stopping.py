"""SIGTERM/SIGINT for ``engramdb mcp``: release memory and its embedded servers, exit 0
(issue 28 item 3).

Why not simply unwind as ``serve`` does: on stdio the SDK reads stdin on a worker thread that
no cancellation can interrupt, so after a signal the event loop waits for that read forever
(a SIGINT hung until the client closed the pipe; a SIGTERM killed the process with -15 and
left the embedded PostgreSQL running). A stdio server has no in-flight work worth draining
beyond the tool call being answered — each write is committed before it returns — so on the
first signal a helper thread closes the ``Memory`` the session opened (projectors stopped,
pools closed, the embedded PostgreSQL claim released, stopping it if this process started it)
and ends the process with status 0. A second signal while closing exits at once (status 1).
The HTTP transport unwinds through uvicorn instead (``serve``'s ``ShutdownRequest``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

log = logging.getLogger("engramdb.mcp")
SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StdioStopper:
    """Holds the session's ``Memory`` and closes it on SIGTERM/SIGINT (see the module doc)."""

    def __init__(self, close_timeout: float = 30.0) -> None:
        self._memory: Any = None
        self._lock = threading.Lock()
        self._requested = threading.Event()
        self._opening = threading.Event()
        self._opened = threading.Event()
        self._timeout = close_timeout

    def open(self, factory: Any) -> Any:
        """``factory()`` (``Memory.open``), held for a signal; a signal that comes while it
        is still opening waits for it (its embedded PostgreSQL would be left otherwise)."""
        self._opening.set()
        try:
            return self.hold(factory())
        finally:
            self._opened.set()

    def hold(self, memory: Any) -> Any:
        """Remember the opened memory (the lifespan's ``open_memory`` wraps ``Memory.open``)."""
        with self._lock:
            self._memory = memory
        return _Closing(memory, self)

    def take(self, memory: Any) -> bool:
        """Whoever takes the memory first closes it (the lifespan at EOF, or a signal)."""
        with self._lock:
            held, self._memory = self._memory is memory, None
        return held

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._requested.is_set():
            os._exit(1)
        self._requested.set()
        threading.Thread(target=self._stop, args=(signal.Signals(signum).name,),
                         name="engramdb-mcp-stop", daemon=True).start()

    def _stop(self, why: str) -> None:
        print(f"engramdb mcp: {why}: closing memory and stopping", file=sys.stderr, flush=True)
        if self._opening.is_set():
            self._opened.wait(self._timeout)
        closer = threading.Thread(target=self._close, daemon=True)
        closer.start()
        closer.join(self._timeout)
        sys.stderr.flush()
        os._exit(0 if not closer.is_alive() else 1)

    def _close(self) -> None:
        memory = self._memory
        if memory is not None and self.take(memory):
            try:
                memory.close()
            except Exception as exc:  # noqa: BLE001 - stopping: report in one line, still exit
                print(f"engramdb mcp: closing memory failed: {exc}", file=sys.stderr, flush=True)


class _Closing:
    """The memory as the lifespan sees it: closing it normally also forgets it here."""

    def __init__(self, memory: Any, stopper: StdioStopper) -> None:
        self._memory = memory
        self._stopper = stopper

    def __getattr__(self, name: str) -> Any:
        return getattr(self._memory, name)

    def close(self) -> None:
        if self._stopper.take(self._memory):
            self._memory.close()
