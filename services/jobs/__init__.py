"""Sleep-time jobs (docs/spec.md §4, issue 12, ADR-0019): one module per job, registered here.

Adding a job is one module with ``JOB = Job(...)`` and one line below; the runner, the CLI
(``engramdb jobs run``) and ``serve --role jobs`` all iterate ``JOBS``, in this order (the
importance job reads what the feedback job recorded and the patterns consolidation found;
vitality reads importance).
"""

from __future__ import annotations

from collections.abc import Sequence

from engramdb.services.jobs import (
    communities,
    consolidation,
    feedback_job,
    importance,
    profiles,
    vitality,
)
from engramdb.services.jobs.base import Job, JobContext, JobTimeout

JOBS: tuple[Job, ...] = (feedback_job.JOB, consolidation.JOB, importance.JOB, vitality.JOB,
                         communities.JOB, profiles.JOB)
BY_NAME: dict[str, Job] = {job.name: job for job in JOBS}


def select(names: str | Sequence[str] | None) -> tuple[Job, ...]:
    if names is None:
        return JOBS
    wanted = (names,) if isinstance(names, str) else tuple(names)
    unknown = [n for n in wanted if n not in BY_NAME]
    if unknown:
        raise ValueError(f"unknown job(s) {unknown}; known: {', '.join(BY_NAME)}")
    return tuple(BY_NAME[n] for n in wanted)


__all__ = ["BY_NAME", "JOBS", "Job", "JobContext", "JobTimeout", "select"]
