"""``engramdb mcp`` restarts its embedded PostgreSQL when it dies, as ``serve`` does (ADR-0051).

Why: an MCP server lives as long as the editor or agent host that spawned it — days — and on
the embedded default it is the process that started PostgreSQL. After a ``kill -9`` (an OOM
kill, a reboot of the data dir's owner, a stray ``pkill postgres``) every tool call failed
until the host restarted the server. ``serve``'s watchdog (``serve/watchdog.py``) already
brings a dead embedded server back on the same data dir, port and password, and the pools
reconnect by themselves; this wraps ``Memory.open`` so the MCP process runs one too — over
PostgreSQL only: an MCP server publishes nothing to NATS, so it must not start one. A
database named by URL is not the process's to restart and is not watched.
"""

from __future__ import annotations

from typing import Any

from engramdb.infra.settings import Settings
from engramdb.services.entrypoints.serve.watchdog import EmbeddedWatchdog


class WatchedMemory:
    """A ``Memory`` with a watchdog over its embedded PostgreSQL; ``close`` stops the
    watchdog first (releasing the claims its restarts took), then the memory — whose claim,
    the last, stops the server if this process started it (ADR-0015)."""

    def __init__(self, memory: Any, watchdog: EmbeddedWatchdog) -> None:
        self._memory = memory
        self.watchdog = watchdog

    def __getattr__(self, name: str) -> Any:
        return getattr(self._memory, name)

    def __enter__(self) -> WatchedMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self.watchdog.stop()
        finally:
            self._memory.close()


def open_watched(settings: Settings) -> WatchedMemory:
    """``Memory.open(settings)`` with its watchdog running."""
    from engramdb.services.memory.facade import Memory

    memory = Memory.open(settings)
    servers = [] if settings.database_url else ["postgres"]
    return WatchedMemory(memory, EmbeddedWatchdog(settings.data_dir, servers, memory.metrics.registry).start())
