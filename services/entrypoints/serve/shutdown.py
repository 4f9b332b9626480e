"""SIGTERM/SIGINT for ``engramdb serve``: a request to stop, never an abrupt exit.

Why this exists: systemd and Docker stop a service with SIGTERM. uvicorn captures the signal,
stops serving and then *re-raises* it once its own shutdown is done, which kills the process
with the default disposition before any of ``serve``'s cleanup runs (ingest not drained,
projectors not stopped, embedded PostgreSQL/NATS claims never released). Here the whole
process owns the two signals for its lifetime: the first one sets a flag (and tells uvicorn
to exit), so every ``finally``/``with`` block unwinds normally and the exit status is 0; a
second one while stopping forces uvicorn to drop open connections. See ADR-0015.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

import uvicorn

log = logging.getLogger("engramdb.server")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class ShutdownRequest:
    """The process-wide stop flag, set by SIGTERM/SIGINT while ``installed()`` is active."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._server: uvicorn.Server | None = None

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    @contextlib.contextmanager
    def installed(self) -> Iterator[ShutdownRequest]:
        """Own SIGINT/SIGTERM until the block ends, then restore them. Off the main thread
        (an embedding host) signals cannot be handled: the host calls ``request_stop()``."""
        previous: dict[int, Any] = {}
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        for sig in SIGNALS:
            previous[sig] = signal.signal(sig, self._handle)
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.request_stop(signal.Signals(signum).name)

    def request_stop(self, why: str = "stop requested") -> None:
        """First call: stop serving and unwind; a second one forces uvicorn to drop open
        connections instead of waiting for them."""
        server = self._server
        if self.event.is_set():
            if server is not None:
                server.force_exit = True
        else:
            log.info("%s: draining and stopping", why)
        self.event.set()
        if server is not None:
            server.should_exit = True

    def watch(self, server: uvicorn.Server) -> None:
        """Let a stop request reach ``server`` (also one that came before it started)."""
        self._server = server
        if self.event.is_set():
            server.should_exit = True

    def wait(self) -> None:
        """Block until a stop is requested (short waits, so the handler runs promptly)."""
        while not self.event.wait(0.5):
            pass


class SignalFreeServer(uvicorn.Server):
    """A uvicorn server that leaves signals to ``ShutdownRequest`` (no re-raise on exit)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield
