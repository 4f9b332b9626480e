"""The background retrier of ``engramdb serve`` (ADR-0014): re-extract pending messages when
the LLM is back — in one process at a time (ADR-0029).

Why a thread with a plain interval and no separate health probe: the first re-extraction of a
round *is* the probe (``services.management.pending.reextract_pending`` stops the round when it fails),
so an outage costs one failed call per interval and no request that could only say "up"
without extracting anything. A round only starts when the pending count (one indexed
``count(*)``) is above zero, so an idle retrier costs a query per interval.

Why elected: every ``serve`` with an LLM starts a retrier, and N of them probed a down LLM N
times per interval and re-extracted the same pending messages side by side (harmless — the
write pipeline makes a repeat a no-op — but N× the LLM calls). With ``leases`` (a database
URL) only the holder of one PostgreSQL advisory lock per schema retries; the others stand by,
try the lock every ``lease_poll`` seconds and take over ~2–3 s after the holder's session ends
(its process died, or it stopped), the same mechanism and grace as the projectors (ADR-0020).
The lease session's ``application_name`` names the process (host:pid), so ``engramdb status``
can say who retries from any process (``retrier_holder``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import psycopg
from psycopg_pool import ConnectionPool

from engramdb.infra.advisory_locks import AdvisoryLocks, lease_holder, namespace, object_key
from engramdb.services.management.pending import ReprocessReport, count_pending, reextract_pending
from engramdb.services.write.pipeline import WritePipeline

log = logging.getLogger(__name__)

LEASE_POLL = 1.0  # seconds between a standby's tries of the lease


def retrier_lease(scope: str) -> tuple[int, int]:
    """The advisory-lock key of the retrier of one memory (``scope``: its schema)."""
    return namespace("extraction-retrier", scope), object_key("retrier")


def retrier_holder(conn: psycopg.Connection[tuple[object, ...]], scope: str) -> str | None:
    """Who retries pending extractions of ``scope`` right now (``engramdb-retrier host:pid``),
    or None when no process holds the lease."""
    return lease_holder(conn, *retrier_lease(scope))


class ExtractionRetrier:
    """Every ``interval_sec``: if extractions are pending, re-extract them (see module doc).

    ``leases``: a PostgreSQL conninfo to elect one retrier per ``lease_scope`` (schema) across
    processes; None runs unconditionally (one process, or tests). ``name``: the lease
    session's ``application_name`` (default ``engramdb-retrier host:pid``)."""

    def __init__(self, pipeline: WritePipeline, pool: ConnectionPool, interval_sec: float = 30.0,
                 *, leases: str | None = None, lease_scope: str = "public",
                 lease_poll: float = LEASE_POLL, name: str | None = None) -> None:
        self.pipeline = pipeline
        self.pool = pool
        self.interval_sec = interval_sec
        self.rounds = 0
        self.last_report: ReprocessReport | None = None
        self.lease_poll = lease_poll
        self.name = (name or f"engramdb-retrier {socket.gethostname()}:{os.getpid()}")[:63]
        self._leases = AdvisoryLocks(leases, self.name) if leases else None
        self._lease = retrier_lease(lease_scope)
        self.holding = self._leases is None  # this process retries (False: standby)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> ReprocessReport | None:
        """One round now (None when nothing was pending)."""
        if count_pending(self.pool) == 0:
            return None
        report = reextract_pending(self.pipeline, self.pool, rotate=self.rounds)
        self.rounds += 1
        self.last_report = report
        if report.extracted:
            log.info("re-extracted %d pending message(s)", len(report.extracted))
        if report.still_pending:
            log.warning("LLM still unavailable for %d pending message(s): %s",
                        len(report.still_pending), report.llm_unavailable)
        return report

    def elected(self) -> bool:
        """True while this process holds the retrier's lease (takes it when it is free)."""
        leases = self._leases
        if leases is None:
            return True
        try:
            if self._lease in leases.check():
                return True
            if self.holding:
                log.warning("extraction retrier lost its lease (lease connection broken); standing by")
                self.holding = False
            if not leases.try_acquire(*self._lease):
                return False
        except Exception as exc:  # noqa: BLE001 - database down: stand by, try again later
            log.debug("retrier lease unavailable: %s", exc)
            self.holding = False
            return False
        # a holder cut off from the database (not dead) notices within one ping: let it stop
        if self._stop.wait(2 * leases.ping_every):
            return False
        log.info("extraction retrier running in this process (%s)", self.name)
        self.holding = True
        return True

    def _run(self) -> None:
        tick = min(self.interval_sec, self.lease_poll) if self._leases else self.interval_sec
        last = time.monotonic()
        while not self._stop.wait(tick):
            if not self.elected() or time.monotonic() - last < self.interval_sec:
                continue
            last = time.monotonic()
            try:
                self.run_once()
            except Exception:  # noqa: BLE001 — a database blip must not end the retrier
                log.exception("pending-extraction round failed; retrying in %.0fs", self.interval_sec)

    def start(self) -> ExtractionRetrier:
        self._thread = threading.Thread(target=self._run, name="engramdb-extraction-retrier", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._leases is not None:  # closing the session hands the lease to a standby
            self._leases.close()
            self.holding = False
