"""``engramdb jobs run``: one pass of the sleep-time jobs (ADR-0019), and ``jobs list``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

jobs_app = typer.Typer(no_args_is_help=True, help="Sleep-time jobs (feedback, consolidation, importance, vitality, communities, profiles).")


@jobs_app.command("list")
def list_jobs() -> None:
    """The registered jobs, in the order a pass runs them."""
    from engramdb.services.jobs import JOBS

    for job in JOBS:
        typer.echo(f"{job.name:12s} {job.description}")


@jobs_app.command("run")
def run(
    job: Annotated[list[str] | None, typer.Option("--job", help="a job name (repeatable; default: all)")] = None,
    agent: Annotated[list[str] | None, typer.Option("--agent", help="an agent id (repeatable; default: all)")] = None,
) -> None:
    """Run the jobs once for every agent (or those named), with a progress bar. Exit code 1
    if any job failed or timed out (each is recorded in mem_job_runs; the others still ran)."""
    from engramdb.infra.database import resolve_nats
    from engramdb.infra.settings import load_settings
    from engramdb.services.jobs import JobContext, select
    from engramdb.services.jobs.runner import run_pass
    from engramdb.services.memory.facade import Memory

    try:
        jobs = select(job or None)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    settings = load_settings()
    # projectors here too: the jobs wait for their own events to be projected (importance
    # reads the patterns consolidation saved). With a server running they stand by (ADR-0020
    # election, nothing runs twice); with none, this process projects (ADR-0030)
    with Memory.open(settings, quiet=True) as memory:
        ctx = JobContext(memory, nats_url=resolve_nats(settings), prefix=settings.subject_prefix,
                         timeout_sec=settings.job_timeout_sec,
                         summary_refresh_interval_days=settings.summary_refresh_interval_days,
                         llm_timeout_sec=settings.llm_timeout_sec)
        runs = run_pass(ctx, jobs, agent or None, progress=True)
    bad = [r for r in runs if r.status in ("failed", "timeout")]
    for r in runs:
        if r.status != "ok" or r.events:
            typer.echo(f"{r.job:12s} {r.agent_id}: {r.status}, {r.events} event(s), "
                       f"{r.seconds:.2f}s{f' ({r.error})' if r.error else ''}")
    typer.echo(f"{len(runs)} job run(s): {len(runs) - len(bad)} ok or skipped, {len(bad)} failed")
    raise typer.Exit(1 if bad else 0)


@jobs_app.command("history")
def history(agent: Annotated[str, typer.Option("--agent", help="agent id")]) -> None:
    """What the jobs concluded for an agent, from the log (``AgentJobs`` events, oldest first;
    ``engramdb history`` shows the memory decisions, corrections included)."""
    import json

    from engramdb.domain.jobs import agent_jobs_id
    from engramdb.services.memory.facade import Memory

    with Memory.open(start_projectors=False, quiet=True) as memory:
        events: list[Any] = list(memory.cell(agent).app.events.get(agent_jobs_id(agent)))
    for e in events:
        fields = {k: v for k, v in vars(e).items()
                  if k not in ("originator_id", "originator_version", "timestamp",
                               "originator_topic")}
        stamp = getattr(e, "timestamp", None)  # None: an erased agent's unreadable event
        typer.echo(json.dumps({"version": e.originator_version, "event": type(e).__name__,
                               "recorded_at": stamp.isoformat() if stamp else None, **fields},
                              default=str))
