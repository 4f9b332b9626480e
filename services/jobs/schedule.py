"""``serve --role jobs`` (and ``all``): the job scheduler on a thread of the server process."""

from __future__ import annotations

import threading
from typing import Any

from engramdb.services.jobs.base import JobContext
from engramdb.services.jobs.runner import run_scheduled


class JobThread:
    def __init__(self, ctx: JobContext, intervals: dict[str, float]) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=run_scheduled, args=(ctx, intervals, self._stop), name="engramdb-jobs",
            daemon=True,
        )
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._thread.join(timeout)


def start_jobs(memory: Any, settings: Any, nats_url: str | None) -> JobThread:
    ctx = JobContext(memory, nats_url=nats_url, prefix=settings.subject_prefix,
                     timeout_sec=settings.job_timeout_sec,
                     summary_refresh_interval_days=settings.summary_refresh_interval_days,
                     llm_timeout_sec=settings.llm_timeout_sec)
    return JobThread(ctx, {
        "feedback": settings.job_feedback_interval_sec,
        "consolidation": settings.job_consolidation_interval_sec,
        "importance": settings.job_importance_interval_sec,
        "vitality": settings.job_vitality_interval_sec,
        "communities": settings.job_communities_interval_sec,
        "profiles": settings.job_profiles_interval_sec,
    })
