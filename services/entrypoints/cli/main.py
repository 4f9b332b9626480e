"""The ``engramdb`` command line: demo, serve, publish, retrieve, rebuild, history, facts, status,
mcp, pending, reprocess, bench.

Every command opens the same ``Memory`` facade the Python API uses, on the embedded default
unless ``ENGRAMDB_DATABASE_URL`` / ``ENGRAMDB_NATS_URL`` are set. For scripts: read commands
take ``--json``; a user's mistake is one ``error: ...`` line on stderr and exit code 2
(``services/entrypoints/user_errors.py``). The offline-extractor notice is printed only by commands that
extract (write, demo, serve, mcp), not by reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from engramdb.domain.time_range import check_instant
from engramdb.services.entrypoints.cli import polish
from engramdb.services.entrypoints.cli.flows import register as register_flow_commands
from engramdb.services.entrypoints.cli.jobs import jobs_app
from engramdb.services.entrypoints.cli.manage import parse_metadata
from engramdb.services.entrypoints.cli.manage import register as register_manage_commands
from engramdb.services.entrypoints.cli.security import keys_app, nats_user_app
from engramdb.services.entrypoints.cli.ui import register as register_ui_command
from engramdb.services.entrypoints.user_errors import cli_user_errors

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="engramdb — event-sourced long-term memory for LLM agents.",
)
bench_app = typer.Typer(no_args_is_help=True, help="Benchmarks (see bench/ and docs/benchmarks.md).")
app.add_typer(bench_app, name="bench")
app.add_typer(keys_app, name="keys")
app.add_typer(nats_user_app, name="nats-user")
app.add_typer(jobs_app, name="jobs")
Json = Annotated[bool, typer.Option("--json", help="print one JSON document")]


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"engramdb {version('engramdb')}")
        except PackageNotFoundError:  # a source checkout that was never installed
            typer.echo("engramdb (not installed: run `pip install -e .`)")
        raise typer.Exit()


@app.callback()
def _main(
    _version_flag: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version")
    ] = False,
) -> None:
    """engramdb — event-sourced long-term memory for LLM agents."""
    polish.warn_unknown_settings()


def _parse_time(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{value!r} is not an ISO-8601 time; try 2026-03-28 or 2026-03-28T14:00:00+00:00"
        ) from None
    try:
        return check_instant(parsed, "--as-of")
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _open_memory(**kwargs: object):  # noqa: ANN202 - the facade type is imported lazily
    """For read commands: quiet (no offline-extractor notice: nothing is extracted)."""
    from engramdb.services.memory.facade import Memory

    return Memory.open(quiet=True, **kwargs)  # type: ignore[arg-type]


def _check_agent(agent: str) -> None:
    from engramdb.domain.agent_id import check_agent_id

    check_agent_id(agent)


@app.command()
def demo(
    keep: Annotated[bool, typer.Option("--keep", help="keep the demo's agent (default: erased at the end)")] = False,
) -> None:
    """Record a small conversation, show events, read models, a rebuild, history and retrieval."""
    from engramdb.services.entrypoints.cli.demo import run_demo

    with cli_user_errors(mistakes=()):
        run_demo(keep=keep)


@app.command()
def serve(
    role: Annotated[str, typer.Option(help="all | ingest | projector | retrieve | jobs")] = "all",
    host: Annotated[str | None, typer.Option(help="HTTP bind address (default ENGRAMDB_HTTP_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="HTTP port (default ENGRAMDB_HTTP_PORT)")] = None,
) -> None:
    """Run the services: NATS ingest, projectors, NATS request/reply retrieve and the HTTP API."""
    from engramdb.infra.settings import load_settings
    from engramdb.services.entrypoints.serve.server import run_server

    polish.plain_logs()
    with cli_user_errors():  # a bad setting is the user's mistake: one line, not a traceback
        settings = load_settings()
    with cli_user_errors(mistakes=()):
        http = {k: v for k, v in (("http_host", host), ("http_port", port)) if v is not None}
        run_server(role=role, settings=settings.model_copy(update=http) if http else settings)


@app.command()
def publish(
    text: Annotated[str, typer.Argument(help="the message text")],
    agent: Annotated[str, typer.Option("--agent", help="agent id")],
    message_id: Annotated[
        str | None, typer.Option("--message-id", help="your id for the message; publishing it again is a no-op")
    ] = None,
    speaker: Annotated[str | None, typer.Option("--speaker", help="who said it, e.g. Ana")] = None,
    session: Annotated[str | None, typer.Option("--session", help="conversation id")] = None,
) -> None:
    """Publish one conversation message onto NATS (JetStream); prints its message id."""
    from nats.errors import NoServersError

    from engramdb.infra.database import resolve_nats
    from engramdb.infra.settings import load_settings
    from engramdb.services.entrypoints.nats.publisher import publish_cli

    settings = load_settings()
    nats_url = resolve_nats(settings)
    with cli_user_errors():
        try:
            report = publish_cli(
                nats_url, agent, text, message_id, speaker, session,
                prefix=settings.subject_prefix,
            )
        except (OSError, NoServersError, RuntimeError) as exc:
            typer.echo(
                f"error: cannot publish to NATS at {nats_url} ({exc or type(exc).__name__}); "
                "check ENGRAMDB_NATS_URL or unset it for the embedded default",
                err=True,
            )
            raise typer.Exit(2) from None
    typer.echo(report)


@app.command()
def retrieve(
    query: Annotated[str, typer.Argument(help="what the agent wants to know")],
    agent: Annotated[str, typer.Option("--agent", help="agent id")],
    as_of: Annotated[str | None, typer.Option("--as-of", help="ISO time: memory as it was")] = None,
    show_facts: Annotated[bool, typer.Option("--facts", help="print scored facts")] = False,
    show_trace: Annotated[bool, typer.Option("--trace", help="print the stage trace")] = False,
    session: Annotated[list[str] | None, typer.Option(
        "--session", help="only this session's turns and their facts (repeat for several)")] = None,
    metadata: Annotated[str | None, typer.Option(
        "--metadata", help='JSON filter on the turns\' metadata, e.g. \'{"channel": "slack"}\'')] = None,
    as_json: Json = False,
) -> None:
    """Print the context string for a query (and, with flags, the scored facts and trace)."""
    with cli_user_errors():
        _check_agent(agent)
        moment = _parse_time(as_of)
        meta = parse_metadata(metadata)
        with _open_memory() as memory:
            memory.wait_for_projections(agent_id=agent)  # like list-facts: see every write so far
            result = memory.retrieve(agent, query, as_of=moment, session_id=session or None, metadata=meta)
            if not result.facts and not result.events and not memory.list_messages(agent, limit=1).items:
                raise LookupError(f"agent {agent!r} has no memory (nothing was ever written for it; "
                                  "`engramdb list-agents` names those that have)")
    if as_json:
        typer.echo(result.model_dump_json(exclude=None if show_trace else {"trace"}))
        return
    typer.echo(result.context or "(no relevant memory)")
    if show_facts:
        for fact in result.facts:
            typer.echo(f"{fact.score:6.3f}  {fact.fact_id}  {fact.fact_text}")
    if show_trace:
        typer.echo(json.dumps(result.trace, indent=2, default=str))


@app.command()
def rebuild(
    projection: Annotated[str | None, typer.Option(help="one read model, e.g. memory (default: all)")] = None,
    cell: Annotated[str | None, typer.Option(help="one cell by name (ENGRAMDB_CELLS; default: all)")] = None,
    as_json: Json = False,
) -> None:
    """Drop and rebuild read models from the event log (the report is JSON either way;
    ``--json`` prints it on one line and no progress bar); every cell, one after another."""
    from engramdb.projections.read_models import select

    with cli_user_errors():
        select(projection)  # an unknown name fails before anything is opened or stopped
        with _open_memory(start_projectors=False) as memory:
            report = memory.rebuild(projection=projection, progress=not as_json, cell=cell)
    typer.echo(report.model_dump_json(indent=None if as_json else 2))


@app.command()
def history(
    agent: Annotated[str, typer.Option("--agent", help="agent id")],
    fact: Annotated[str | None, typer.Option("--fact", help="a fact id")] = None,
    as_json: Json = False,
) -> None:
    """The timeline of a fact (or of every decision of an agent), read from the log: one
    decision a line (``--json``: one JSON array)."""
    with cli_user_errors():
        _check_agent(agent)
        with _open_memory(start_projectors=False) as memory:
            entries = memory.history(agent, fact)
    if fact is not None and not entries:  # as HTTP's 404 and get-fact's exit 2 (issue 28)
        typer.echo(f"error: agent {agent!r} has no fact {fact!r}", err=True)
        raise typer.Exit(2)
    if as_json:
        typer.echo("[" + ",".join(e.model_dump_json() for e in entries) + "]")
        return
    for entry in entries:
        typer.echo(polish.history_line(entry))


@app.command()
def facts(
    agent: Annotated[str, typer.Option("--agent", help="agent id")],
    as_of: Annotated[str | None, typer.Option("--as-of", help="ISO time (default: now)")] = None,
    as_json: Json = False,
) -> None:
    """What memory held at a moment, replayed from the log: one fact a line (``--json``: one
    JSON array)."""
    with cli_user_errors():
        _check_agent(agent)
        moment = _parse_time(as_of) or datetime.now(UTC)
        with _open_memory(start_projectors=False) as memory:
            rows = memory.facts_as_of(agent, moment)
    if as_json:
        typer.echo("[" + ",".join(r.model_dump_json() for r in rows) + "]")
        return
    for row in rows:
        typer.echo(f"{row.fact_id}  {row.status:<10} {row.text}")


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="the full health report as JSON")] = False,
    max_lag: Annotated[
        int | None, typer.Option(min=0, help="events a projection may lag (default ENGRAMDB_READY_MAX_LAG)")
    ] = None,
) -> None:
    """Health of the deployment: database, NATS, projection positions and lags (what /readyz
    answers), and each LLM operation's model and endpoint host. Exit code 1 when unhealthy,
    so scripts and probes can use it."""
    from engramdb.infra.settings import load_settings
    from engramdb.services.entrypoints.cli.status import (
        deployment_status,
        format_llm_operations,
        llm_operations,
    )
    from engramdb.services.observability.health import format_report

    with cli_user_errors():
        settings = load_settings()
    report, llms = deployment_status(settings, max_lag), llm_operations(settings)
    if as_json:
        typer.echo(json.dumps({**report.model_dump(mode="json"), "llm_operations": llms}, indent=2))
    else:
        typer.echo("\n".join([format_report(report), *format_llm_operations(llms)]))
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def mcp(
    transport: Annotated[str, typer.Option(help="stdio (for a local client) | http")] = "stdio",
    host: Annotated[str | None, typer.Option(help="http: bind address (default ENGRAMDB_HTTP_HOST)")] = None,
    port: Annotated[int, typer.Option(help="http: port")] = 8788,
    agent: Annotated[
        str | None,
        typer.Option(help="pin the server to this agent (its tools then take no agent_id) or to a 'prefix*'"),
    ] = None,
) -> None:
    """Serve memory as MCP tools (write, retrieve, list_facts, get_fact, delete_fact, history):
    on stdio for a local client, or streamable HTTP at http://HOST:PORT/mcp (API keys as
    for the HTTP API; a non-loopback bind needs them)."""
    from engramdb.infra.settings import load_settings
    from engramdb.services.entrypoints.mcp.transport import run_mcp

    if transport not in ("stdio", "http"):
        typer.echo(f"error: unknown transport {transport!r}; use stdio or http", err=True)
        raise typer.Exit(2)
    settings = load_settings()
    with cli_user_errors():
        run_mcp(settings, transport, host or settings.http_host, port, agent)


@app.command()
def pending(
    agent: Annotated[str | None, typer.Option("--agent", help="one agent (default: all)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="one JSON object per line")] = False,
) -> None:
    """Messages an LLM outage left unextracted; `serve` retries them, or `reprocess --failed`."""
    with cli_user_errors():
        if agent is not None:
            _check_agent(agent)
        with _open_memory() as memory:
            memory.wait_for_projections()
            items = memory.pending_extractions(agent)
    for item in items:
        if as_json:
            typer.echo(item.model_dump_json())
        else:
            typer.echo(f"{item.agent_id}  {item.message_id}  recorded {item.recorded_at:%Y-%m-%d %H:%M:%S}"
                       f"  attempts {item.attempts}  {item.reason}")
    if not as_json:
        typer.echo(f"{len(items)} pending extraction(s)")


@app.command()
def reprocess(
    agent: Annotated[str | None, typer.Option("--agent", help="one agent (default: all)")] = None,
    message: Annotated[str | None, typer.Option("--message", help="one message id")] = None,
    failed: Annotated[bool, typer.Option("--failed", help="messages whose extraction is pending")] = False,
) -> None:
    """Re-run extraction: --failed for messages an LLM outage left pending; otherwise the
    agent's processed messages (or one --message) again, superseding their facts (ADR-0023)."""
    from engramdb.services.memory.facade import Memory

    if not failed and agent is None:
        typer.echo("reprocess needs --agent A (and optionally --message M), or --failed", err=True)
        raise typer.Exit(2)
    with cli_user_errors():
        if agent is not None:
            _check_agent(agent)
        with Memory.open() as memory:  # it extracts: the offline notice is due here
            memory.wait_for_projections()
            if not failed:
                assert agent is not None
                result = memory.reprocess(agent, message)
                typer.echo(result.model_dump_json(indent=2))
                if any(m.llm_unavailable for m in result.messages):
                    typer.echo("LLM unavailable: stopped; run again when it is back", err=True)
                    raise typer.Exit(1)
                return
            report = memory.reprocess_pending(agent, message)
    typer.echo(report.model_dump_json(indent=2))
    if report.still_pending:
        typer.echo(f"LLM still unavailable: {report.llm_unavailable}", err=True)
        raise typer.Exit(1)


@bench_app.command(
    "locomo", context_settings={"allow_extra_args": True, "ignore_unknown_options": True}
)
def bench_locomo(ctx: typer.Context) -> None:
    """LoCoMo evidence recall beside BM25, dense and hybrid baselines (args pass through).

    The benchmarks are not part of the installed package (they need the repository's
    ``bench/`` folder and its dev dependencies), so this runs ``python -m bench.locomo.run`` in
    the checkout found from the working directory, and says what to do outside one.
    """
    checkout = _find_checkout(Path.cwd())
    if checkout is None:
        typer.echo(
            "error: engramdb bench locomo runs from a source checkout: clone the repository, "
            "`pip install -e '.[dev]'` and run it from the checkout's root.",
            err=True,
        )
        raise typer.Exit(2)
    done = subprocess.run([sys.executable, "-m", "bench.locomo.run", *ctx.args], cwd=checkout)
    raise typer.Exit(done.returncode)


def _find_checkout(start: Path) -> Path | None:
    for folder in (start, *start.parents):
        if (folder / "bench" / "locomo" / "run.py").is_file():  # bench/<benchmark>/ (ADR-0043)
            return folder
    return None


register_manage_commands(app)  # write, list-facts, get-fact, delete-fact, forget-agent, ...
register_ui_command(app)  # engramdb ui: the web inspector (ADR-0044)
register_flow_commands(app)  # add-facts, export, import, webhooks (ADR-0049)


def main() -> None:
    polish.build(app)(prog_name="engramdb")


if __name__ == "__main__":
    main()
