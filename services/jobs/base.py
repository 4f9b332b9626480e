"""What a job is, and what it gets to work with.

A job is a function of (context, agent) that reads memory and saves events on the agent's
``AgentJobs`` aggregate (``domain.jobs``), returning how many it saved. Nothing else: the
runner (``services.jobs.runner``) does locking, deadlines, recording and progress, so a job
module holds only its own rule.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engramdb.domain.jobs import AgentJobs, agent_jobs_id


class JobTimeout(RuntimeError):
    """The job passed its deadline (``ENGRAMDB_JOB_TIMEOUT_SEC``); checked cooperatively."""


@dataclass
class JobContext:
    """``memory``: the ``Memory`` facade (log, read pool, projections, ``llms``); ``nats_url``:
    the broker holding the feedback stream (None: no feedback is read)."""

    memory: Any
    nats_url: str | None = None
    prefix: str = "engramdb"
    timeout_sec: float = 300.0
    summary_refresh_interval_days: float = 7.0  # ADR-0022, job ``profiles``
    llm_timeout_sec: float = 60.0
    deadline: float = field(default=0.0)

    def check_deadline(self) -> None:
        if self.deadline and time.monotonic() > self.deadline:
            raise JobTimeout(f"job passed its {self.timeout_sec:.0f} s deadline")

    def llm(self, operation: str) -> tuple[Any, float]:
        """(provider or None, call timeout) of ``operation`` (``consolidation``,
        ``profiles``): the memory's per-operation provider (ADR-0052) and its own timeout,
        else ``llm_timeout_sec``. A memory without ``llms`` (a stub) has one ``llm``."""
        llms = getattr(self.memory, "llms", None)
        if llms is None:
            return getattr(self.memory, "llm", None), self.llm_timeout_sec
        return llms.get(operation), llms.timeout_sec(operation, self.llm_timeout_sec)

    def jobs_aggregate(self, agent_id: str) -> AgentJobs:
        """The agent's job aggregate, read from the log (never a stale cached copy: another
        job process may have saved since)."""
        app = self.memory.app
        aggregate_id = agent_jobs_id(agent_id)
        app.forget_cached(aggregate_id)
        try:
            found: Any = app.repository.get(aggregate_id)
        except Exception as exc:  # AggregateNotFoundError
            if type(exc).__name__ != "AggregateNotFoundError":
                raise
            return AgentJobs(agent_id=agent_id)
        assert isinstance(found, AgentJobs)
        return found

    def save(self, aggregate: AgentJobs) -> int:
        """Save; returns the log position of the last event (0 when nothing was pending)."""
        recordings = self.memory.app.save(aggregate)
        return recordings[-1].notification.id if recordings else 0


@dataclass(frozen=True)
class Job:
    """One registry entry: ``run(ctx, agent_id) -> events saved``."""

    name: str
    run: Callable[[JobContext, str], int]
    description: str
