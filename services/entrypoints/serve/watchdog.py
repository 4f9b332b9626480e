"""``serve`` restarts the embedded servers it uses when they die (issue 28 item 4, ADR-0051).

Why: after ``kill -9`` of the embedded PostgreSQL or NATS, ``serve`` answered ``/readyz`` 503
forever — its pools and NATS client reconnect, but to nothing — until some other engramdb
command happened to start the server again. The process that runs on the embedded default is
the one that should bring it back: a thread checks every second whether each embedded server
serve relies on still runs and, if not, starts it again with ``ensure_*`` (same data dir,
port and password, so every pool and client reconnects by itself), with exponential backoff
(1 s doubling to 30 s) while starting fails. Each restart is logged and counted in
``/metrics`` as ``engramdb_embedded_restarts_total{server}``.

Servers named by URL (``ENGRAMDB_DATABASE_URL``, ``ENGRAMDB_NATS_URL``) are not serve's to
restart and are not watched. The handles the restarts take are released when serve stops,
before serve's own, so the last release still stops the server (ADR-0015).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from engramdb.infra.embedded_nats import ensure_nats, nats_running
from engramdb.infra.embedded_postgres import ensure_postgres, postgres_running

log = logging.getLogger("engramdb.server")
NAMES = {"postgres": "PostgreSQL", "nats": "NATS"}


@dataclass
class _Watched:
    name: str
    running: Callable[[Path], int | None]
    start: Callable[[Path], Any]
    next_try: float = 0.0
    backoff: float = 1.0
    handles: list[Any] = field(default_factory=list)


class EmbeddedWatchdog:
    """Restart the embedded servers in ``data_dir`` that ``servers`` names when they die."""

    def __init__(self, data_dir: Path, servers: list[str], registry: CollectorRegistry | None,
                 interval: float = 1.0, max_backoff: float = 30.0) -> None:
        self.data_dir = data_dir
        self.interval = interval
        self.max_backoff = max_backoff
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.restarts = Counter(
            "engramdb_embedded_restarts", "Embedded servers restarted by this process after "
            "they died", labelnames=["server"], registry=registry,
        )
        table: dict[str, _Watched] = {
            "postgres": _Watched("postgres", postgres_running,
                                 lambda d: ensure_postgres(d, stop_on_exit=False)),
            "nats": _Watched("nats", nats_running, lambda d: ensure_nats(d, stop_on_exit=False)),
        }
        self.watched = [table[s] for s in servers]
        for w in self.watched:
            self.restarts.labels(server=w.name)  # the series exists at 0

    def start(self) -> EmbeddedWatchdog:
        if self.watched:
            self._thread = threading.Thread(target=self._loop, name="engramdb-watchdog",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        for w in self.watched:
            for handle in w.handles:
                handle.stop()  # not the last claim while serve's own is held: no stop here
            w.handles.clear()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            for w in self.watched:
                if self._stop.is_set():
                    return
                self.check(w)

    def check(self, w: _Watched) -> bool:
        """One look at ``w``; True if it was restarted now."""
        if w.running(self.data_dir) is not None:
            w.backoff = 1.0
            return False
        now = time.monotonic()
        if now < w.next_try:
            return False
        label = NAMES[w.name]
        log.warning("embedded %s is not running; restarting it", label)
        start = time.monotonic()
        try:
            w.handles.append(w.start(self.data_dir))
        except Exception as exc:  # noqa: BLE001 - keep watching; say why in one line
            w.next_try = now + w.backoff
            log.error("restarting embedded %s failed (%s: %s); next try in %.0f s",
                      label, type(exc).__name__, exc, w.backoff)
            w.backoff = min(w.backoff * 2, self.max_backoff)
            return False
        w.backoff = 1.0
        self.restarts.labels(server=w.name).inc()
        log.warning("embedded %s restarted in %.1f s", label, time.monotonic() - start)
        return True


def embedded_servers(settings: Any, role: str) -> list[str]:
    """Which embedded servers ``serve --role role`` relies on (not those named by URL)."""
    servers = []
    if not settings.database_url:
        servers.append("postgres")
    if not settings.nats_url and role != "projector":
        servers.append("nats")
    return servers
