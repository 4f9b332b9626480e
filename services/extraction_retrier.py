"""The background retrier of ``engramdb serve`` (ADR-0014): re-extract pending messages when
the LLM is back.

Why a thread with a plain interval and no separate health probe: the first re-extraction of a
round *is* the probe (``services.pending.reextract_pending`` stops the round when it fails),
so an outage costs one failed call per interval and no request that could only say "up"
without extracting anything. A round only starts when the pending count (one indexed
``count(*)``) is above zero, so an idle retrier costs a query per interval.
"""

from __future__ import annotations

import logging
import threading

from psycopg_pool import ConnectionPool

from engramdb.services.pending import ReprocessReport, count_pending, reextract_pending
from engramdb.services.write import WritePipeline

log = logging.getLogger(__name__)


class ExtractionRetrier:
    """Every ``interval_sec``: if extractions are pending, re-extract them (see module doc)."""

    def __init__(self, pipeline: WritePipeline, pool: ConnectionPool, interval_sec: float = 30.0) -> None:
        self.pipeline = pipeline
        self.pool = pool
        self.interval_sec = interval_sec
        self.rounds = 0
        self.last_report: ReprocessReport | None = None
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

    def _run(self) -> None:
        while not self._stop.wait(self.interval_sec):
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
