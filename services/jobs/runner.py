"""Running jobs: one pass (``engramdb jobs run``) or on a schedule (``serve --role jobs``).

Per (job, agent) the runner:
- takes a PostgreSQL advisory lock keyed by schema (the cell's) + job + agent on its own connection
  (``pg_try_advisory_lock``): a second job process skips the pair instead of running it twice;
- sets a deadline the job checks (``JobTimeout``), so a stuck job cannot hold a pass forever;
- catches any failure, logs it and records it in ``mem_job_runs`` — one row per (job, agent):
  last status (``ok``, ``failed``, ``timeout``, ``skipped``), error, events saved, duration,
  run and failure counts — then goes on with the next pair. That table is operational state
  (like the projections' tracking tables), not a read model: it is not derived from the
  log and a rebuild leaves it alone (ADR-0019).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from engramdb.services.jobs import JOBS, Job, JobContext, JobTimeout

log = logging.getLogger("engramdb.jobs")

JOB_RUNS_DDL = """
CREATE TABLE IF NOT EXISTS mem_job_runs (
    job text NOT NULL,
    agent_id text NOT NULL,
    status text NOT NULL,
    error text,
    events integer NOT NULL DEFAULT 0,
    duration_ms real NOT NULL DEFAULT 0,
    started_at timestamptz NOT NULL,
    runs integer NOT NULL DEFAULT 0,
    failures integer NOT NULL DEFAULT 0,
    PRIMARY KEY (job, agent_id)
)"""
_RECORD = """
INSERT INTO mem_job_runs AS r (job, agent_id, status, error, events, duration_ms, started_at,
                               runs, failures)
VALUES (%(job)s, %(agent)s, %(status)s, %(error)s, %(events)s, %(ms)s, now(), 1, %(failed)s)
ON CONFLICT (job, agent_id) DO UPDATE SET status = EXCLUDED.status, error = EXCLUDED.error,
    events = EXCLUDED.events, duration_ms = EXCLUDED.duration_ms,
    started_at = EXCLUDED.started_at, runs = r.runs + 1, failures = r.failures + EXCLUDED.failures
"""


@dataclass(frozen=True)
class JobRun:
    job: str
    agent_id: str
    status: str  # ok | failed | timeout | skipped
    events: int
    seconds: float
    error: str | None = None


def list_agents(memory: Any) -> list[str]:
    with memory.pool.connection() as conn:
        return [r[0] for r in conn.execute("SELECT agent_id FROM mem_agents ORDER BY agent_id")]


def ensure_job_tables(memory: Any) -> None:
    with memory.pool.connection() as conn, conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('engramdb-job-ddl'))")
        conn.execute(JOB_RUNS_DDL)


def _run_locked(ctx: JobContext, job: Job, agent_id: str) -> JobRun:
    started = time.monotonic()
    key = f"{ctx.memory.schema}/{job.name}"
    with ctx.memory.pool.connection() as lock_conn:
        got = lock_conn.execute(
            "SELECT pg_try_advisory_lock(hashtext(%s), hashtext(%s))", (key, agent_id)
        ).fetchone()[0]
        lock_conn.commit()
        if not got:
            return JobRun(job.name, agent_id, "skipped", 0, 0.0, "running in another process")
        try:
            ctx.deadline = started + ctx.timeout_sec
            try:
                events = job.run(ctx, agent_id)
                status, error = "ok", None
            except JobTimeout as exc:
                events, status, error = 0, "timeout", str(exc)
            except Exception as exc:  # noqa: BLE001 - one job failing never stops the others
                events, status, error = 0, "failed", f"{type(exc).__name__}: {exc}"
                log.exception("job %s failed for agent %s", job.name, agent_id)
        finally:
            lock_conn.execute("SELECT pg_advisory_unlock(hashtext(%s), hashtext(%s))",
                              (key, agent_id))
            lock_conn.commit()
    return JobRun(job.name, agent_id, status, events, time.monotonic() - started, error)


def _record(memory: Any, run: JobRun) -> None:
    try:
        with memory.pool.connection() as conn:
            conn.execute(_RECORD, {
                "job": run.job, "agent": run.agent_id, "status": run.status, "error": run.error,
                "events": run.events, "ms": run.seconds * 1000.0,
                "failed": int(run.status in ("failed", "timeout")),
            })
    except Exception:  # noqa: BLE001 - the record is diagnostics; the pass goes on
        log.exception("could not record job run %s/%s", run.job, run.agent_id)


def run_pass(
    ctx: JobContext,
    jobs: Sequence[Job] = JOBS,
    agents: Sequence[str] | None = None,
    progress: bool = False,
) -> list[JobRun]:
    """Every job for every agent (default: all agents in ``mem_agents``), job by job; with
    several cells (ADR-0028), one pass per cell on that cell's store."""
    cells = getattr(ctx.memory, "cells", None)
    if cells is not None and len(cells) > 1:
        out: list[JobRun] = []
        for cell in cells:
            mine = None if agents is None else [a for a in agents if ctx.memory.cell(a) is cell]
            if mine != []:
                out += _run_cell_pass(replace(ctx, memory=cell), jobs, mine, progress)
        return out
    return _run_cell_pass(ctx, jobs, agents, progress)


def _run_cell_pass(
    ctx: JobContext, jobs: Sequence[Job], agents: Sequence[str] | None, progress: bool
) -> list[JobRun]:
    ensure_job_tables(ctx.memory)
    agents = list(agents) if agents is not None else list_agents(ctx.memory)
    pairs = [(job, agent) for job in jobs for agent in agents]
    bar: Any = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(pairs), unit="job", desc="jobs")
    out: list[JobRun] = []
    for job, agent in pairs:
        run = _run_locked(ctx, job, agent)
        if run.status != "skipped":
            _record(ctx.memory, run)
        if run.status in ("failed", "timeout"):
            log.warning("job %s for %s: %s (%s)", job.name, agent, run.status, run.error)
        out.append(run)
        if bar is not None:
            bar.set_postfix_str(f"{job.name} {agent}"[:40])
            bar.update(1)
    if bar is not None:
        bar.close()
    return out


def run_scheduled(ctx: JobContext, intervals: dict[str, float], stop: threading.Event) -> None:
    """``serve --role jobs``: each job every ``intervals[name]`` seconds until ``stop``."""
    due = dict.fromkeys(intervals, 0.0)
    while not stop.is_set():
        now = time.monotonic()
        ready = [job for job in JOBS if job.name in due and due[job.name] <= now]
        for job in ready:
            try:
                run_pass(ctx, [job])
            except Exception:  # noqa: BLE001 - a broken pass (database away) retries later
                log.exception("job pass %s failed", job.name)
            due[job.name] = time.monotonic() + intervals[job.name]
        stop.wait(max(1.0, min(due.values()) - time.monotonic()) if due else 60.0)
