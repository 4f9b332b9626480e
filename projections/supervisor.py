"""Keep projectors running: restart a dead ``ProjectionRunner`` with capped exponential backoff.

Why: eventsourcing's runner ends its processing thread on the first error (a database restart,
a dropped LISTEN connection, a failing statement) and only reports it through
``is_interrupted`` / ``run_forever``; nothing restarts it. Left alone, one 3-second PostgreSQL
crash stops every read model for good while writes go on being recorded.

The supervisor uses only the library's own signals: ``is_interrupted`` says a runner stopped,
``__exit__`` joins its threads and re-raises its thread's error (which we log and keep as the
projection's ``last_error``). A restarted runner resumes from its view's tracking position
(data in PostgreSQL), and every batch commits with its tracking row, so a restart never
skips or double-applies an event. Restarts are delayed ``initial_backoff * 2**(n-1)`` seconds
for the n-th consecutive failure, capped at ``max_backoff``; the count resets once a runner
has stayed up ``healthy_after`` seconds. A projection counts as *failing* (``/readyz`` 503)
from its failure until it has stayed up that long again.

While the database is down, building a runner blocks in its connection pool (up to
eventsourcing's ``POSTGRES_CONNECT_TIMEOUT``, 30 s by default) and completes as soon as the
server is back; if it times out, that is one more failure and the next try follows the backoff.

Several processes (ADR-0020): ``make(name)`` may return ``None`` — another process holds the
projection's lease — and the projection is then *standby*: healthy, not running here, tried
again every ``standby_poll`` seconds, so it takes over within about that long once the holder's
session ends. ``holds(name)`` (optional) says whether this process still holds the lease of a
running projection; a runner whose lease was lost (its lease connection broke) is stopped and
the projection goes back to standby.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

INITIAL_BACKOFF = 0.1  # seconds before the first restart
MAX_BACKOFF = 2.0  # cap: a database back after a crash is noticed within this
LOG_EVERY = 30  # after the first 3, log every 30th failed attempt of one outage (~1/min)
HEALTHY_AFTER = 2.0  # seconds up before a restarted runner counts as recovered
POLL = 0.1  # how often runners are looked at
STANDBY_POLL = 0.5  # how often a standby tries to take its projection's lease


@dataclass
class ProjectorStatus:
    """What ``Memory.health()`` and ``/metrics`` report for one in-process projector."""

    running: bool = False
    standby: bool = False  # another process runs it (ADR-0020); healthy
    restarts: int = 0  # successful restarts since start
    failures: int = 0  # consecutive failures (0 = healthy)
    last_error: str | None = None
    started_at: float = 0.0
    next_attempt: float = 0.0

    @property
    def failing(self) -> bool:
        return self.failures > 0


def describe(error: BaseException | None) -> str:
    if error is None:
        return "stopped without an error"
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}"[:300]


def retire(runner: Any) -> BaseException | None:
    """Join a stopped runner's threads, close its connections; return its thread's error."""
    error: BaseException | None = None
    try:
        runner.__exit__(None, None, None)  # re-raises the processing thread's error
    except Exception as exc:  # noqa: BLE001 - that error is what we want to report
        error = exc
    try:
        runner.view.datastore.close()
    except Exception:  # noqa: BLE001 - the server may be gone; nothing left to release
        log.debug("closing a dead projector's datastore failed", exc_info=True)
    return error


class Supervisor:
    """A daemon thread that watches ``runners`` (shared, guarded by ``lock``) and restarts
    dead ones with ``make(name)``; ``on_restart(name)`` is called after each restart."""

    def __init__(
        self,
        names: Iterable[str],
        runners: dict[str, Any],
        lock: threading.Lock,
        make: Callable[[str], Any],
        *,
        on_restart: Callable[[str], None] | None = None,
        initial_backoff: float = INITIAL_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
        healthy_after: float = HEALTHY_AFTER,
        poll: float = POLL,
        holds: Callable[[str], bool] | None = None,
        standby_poll: float = STANDBY_POLL,
    ) -> None:
        self.runners = runners
        self.lock = lock
        self.make = make
        self.on_restart = on_restart
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.healthy_after = healthy_after
        self.poll = poll
        self.holds = holds
        self.standby_poll = standby_poll
        now = time.monotonic()
        self.status = {name: ProjectorStatus(running=True, started_at=now) for name in names}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engramdb-projector-supervisor",
                                        daemon=True)

    def start(self) -> Supervisor:
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop watching. A restart in progress (connecting can take the database's connect
        timeout) is not waited for beyond ``timeout``: it retires its own runner on return."""
        self._stopping.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def backoff(self, failures: int) -> float:
        return float(min(self.max_backoff, self.initial_backoff * 2 ** max(failures - 1, 0)))

    def _run(self) -> None:
        while not self._stopping.wait(self.poll):
            for name, state in self.status.items():
                if self._stopping.is_set():
                    return
                try:
                    self._check(name, state)
                except Exception:  # noqa: BLE001 - the supervisor itself must not die
                    log.exception("projector supervisor: checking %r failed", name)

    def _check(self, name: str, state: ProjectorStatus) -> None:
        now = time.monotonic()
        with self.lock:
            runner = self.runners.get(name)
        if runner is not None and not runner.is_interrupted.is_set():
            if self.holds is not None and not self.holds(name):
                with self.lock:
                    self.runners.pop(name, None)
                retire(runner)
                log.warning("projection %r lost its lease (lease connection broken); standing by", name)
                state.running, state.standby, state.next_attempt = False, True, now
                return
            if state.failures and now - state.started_at >= self.healthy_after:
                log.info("projection %r recovered after %d restart(s)", name, state.restarts)
                state.failures = 0
            return
        if runner is not None:  # it died: retire it, schedule the restart
            with self.lock:
                self.runners.pop(name, None)
            self._failed(name, state, retire(runner), "stopped")
            return
        if now < state.next_attempt:
            return
        try:
            new = self.make(name)
        except Exception as exc:  # noqa: BLE001 - e.g. the database is still down
            self._failed(name, state, exc, "could not restart")
            return
        if new is None:  # another process holds the lease: stand by
            state.running, state.standby, state.failures = False, True, 0
            state.next_attempt = time.monotonic() + self.standby_poll
            return
        with self.lock:
            if self._stopping.is_set():  # stop() raced us: do not leak a runner
                retire(new)
                return
            self.runners[name] = new
        state.running, state.started_at = True, time.monotonic()
        if state.standby:  # a takeover, not a restart after an error
            state.standby = False
            log.warning("projection %r taken over by this process", name)
            return
        state.restarts += 1
        log.warning("projection %r restarted (restart %d)", name, state.restarts)
        if self.on_restart is not None:
            self.on_restart(name)

    def _failed(self, name: str, state: ProjectorStatus, error: BaseException | None,
                what: str) -> None:
        state.running, state.standby = False, False
        state.failures += 1
        state.last_error = describe(error)
        delay = self.backoff(state.failures)
        state.next_attempt = time.monotonic() + delay
        level = logging.WARNING if state.failures <= 3 or state.failures % LOG_EVERY == 0 else logging.DEBUG
        log.log(level, "projection %r %s (failure %d: %s); retrying in %.1f s", name, what,
                state.failures, state.last_error, delay)
