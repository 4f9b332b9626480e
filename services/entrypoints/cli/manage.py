"""CLI commands for managing memory: ``write`` (with ``--dry-run``), ``list-facts``,
``get-fact``, ``delete-fact``, ``forget-agent``, ``erase``, ``list-entities``, ``list-agents``,
``list-messages`` — the ``Memory`` methods of the same names (dashes for underscores).

For people and scripts: every read command takes ``--json`` (one JSON document on stdout);
a user's mistake (invalid agent id, unknown fact, bad cursor or time, unreachable database)
prints one ``error: ...`` line on stderr and exits with code 2, never a traceback.
``register(app)`` adds them to the ``engramdb`` Typer app.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from engramdb.domain.agent_id import check_agent_id
from engramdb.services.entrypoints.cli.erase_nats import attach_nats
from engramdb.services.entrypoints.user_errors import cli_user_errors, one_line

Agent = Annotated[str, typer.Option("--agent", help="agent id")]
Json = Annotated[bool, typer.Option("--json", help="print one JSON document")]
Limit = Annotated[int, typer.Option("--limit", help="items per page (1-500)")]
Cursor = Annotated[str | None, typer.Option("--cursor", help="next_cursor of the previous page")]
Actor = Annotated[str | None, typer.Option("--actor", help="who asks (default: cli)")]
Metadata = Annotated[str | None, typer.Option(
    "--metadata", help='JSON filter on the turns\' metadata, e.g. \'{"channel": "slack"}\' (issue 24)')]


_user_errors = cli_user_errors  # the names other modules import
_one_line = one_line


def _time(value: str | None, option: str) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{option} {value!r} is not an ISO-8601 time; try 2026-03-28 or 2026-03-28T14:00:00+00:00"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def parse_metadata(raw: str | None) -> dict[str, Any] | None:
    """``--metadata``'s filter tree; not JSON (or not an object) is a usage error."""
    if raw is None:
        return None
    try:
        tree = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--metadata is not JSON: {exc}") from None
    except RecursionError:
        raise ValueError("--metadata: nested too deeply") from None
    if not isinstance(tree, dict):
        raise ValueError("--metadata: a filter is a JSON object")
    return tree


@contextmanager
def _memory(*, quiet: bool = True) -> Iterator[Any]:
    """The facade with its projectors caught up, so a read sees every write so far."""
    from engramdb.services.memory.facade import Memory

    with Memory.open(quiet=quiet) as memory:
        memory.wait_for_projections()
        yield memory


def _show_page(page: Any, as_json: bool, line: Any) -> None:
    if as_json:
        typer.echo(page.model_dump_json())
        return
    for item in page.items:
        typer.echo(line(item))
    if not page.items:
        typer.echo("(nothing)")
    if page.next_cursor:
        typer.echo(f"more: --cursor {page.next_cursor}")


def _fact_line(f: Any) -> str:
    return f"{f.fact_id}  {f.status:<10}  {f.valid_from:%Y-%m-%d}  {f.text}"


def write(
    text: Annotated[str, typer.Argument(help="the message text")],
    agent: Agent,
    speaker: Annotated[str | None, typer.Option("--speaker", help="who said it, e.g. Ana")] = None,
    session: Annotated[str | None, typer.Option("--session", help="conversation id")] = None,
    message_id: Annotated[
        str | None, typer.Option("--message-id", help="your id for the turn; repeating it is a no-op")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="show decisions, save nothing")] = False,
    infer: Annotated[
        bool, typer.Option("--infer/--no-infer", help="--no-infer: store the turn only")
    ] = True,
    as_json: Json = False,
) -> None:
    """Write one message through the pipeline (no NATS) and print the decisions."""
    with _user_errors():
        check_agent_id(agent)
        from engramdb.services.memory.facade import Memory

        with Memory.open() as memory:
            result = memory.write(
                agent, text, speaker=speaker, session_id=session, message_id=message_id,
                dry_run=dry_run, infer=infer,
            )
    if as_json:
        typer.echo(result.model_dump_json())
        return
    head = "dry run (nothing saved)" if dry_run else f"written at position {result.position}"
    typer.echo(f"{head}: message {result.message_id}" + (" (duplicate)" if result.duplicate else ""))
    for d in result.decisions:
        typer.echo(f"  {d.kind:<12} {d.fact_id or d.target_fact_id or d.entity_key or ''}  {d.text or ''}")
    for r in result.rejected:
        typer.echo(f"  REJECTED     {r.reason}")


def list_facts(
    agent: Agent,
    status: Annotated[str | None, typer.Option(help="active|superseded|retracted|forgotten|all")] = None,
    entity: Annotated[str | None, typer.Option(help="entity key or name")] = None,
    session: Annotated[str | None, typer.Option(help="only this conversation id")] = None,
    speaker: Annotated[str | None, typer.Option(help="only turns of this speaker")] = None,
    valid_at: Annotated[str | None, typer.Option("--valid-at", help="ISO time")] = None,
    as_of: Annotated[str | None, typer.Option("--as-of", help="ISO time")] = None,
    text: Annotated[str | None, typer.Option(help="text contains")] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
    as_json: Json = False,
    category: Annotated[str | None, typer.Option(help="e.g. directive (ADR-0045)")] = None,
    metadata: Metadata = None,
) -> None:
    """List an agent's facts (active by default), a page at a time."""
    with _user_errors():
        check_agent_id(agent)
        when, asof = _time(valid_at, "--valid-at"), _time(as_of, "--as-of")
        tree = parse_metadata(metadata)
        with _memory() as memory:
            page = memory.list_facts(
                agent, status=status, entity=entity, session=session, speaker=speaker,
                valid_at=when, as_of=asof, text=text, limit=limit, cursor=cursor,
                category=category, metadata=tree,
            )
    _show_page(page, as_json, _fact_line)


def get_fact(
    agent: Agent,
    fact: Annotated[str, typer.Option("--fact", help="a fact id")],
    as_json: Json = False,
) -> None:
    """One fact with its provenance (source messages) and where its history is."""
    with _user_errors():
        check_agent_id(agent)
        with _memory() as memory:
            detail = memory.get_fact(agent, fact)
    if as_json:
        typer.echo(detail.model_dump_json())
        return
    typer.echo(_fact_line(detail))
    for s in detail.sources:
        hidden = " (hidden)" if s.hidden else ""
        typer.echo(f"  source {s.message_id}{hidden}: {s.speaker or '?'}: {s.text or '(not projected)'}")
    typer.echo(f"  history: engramdb history --agent {agent} --fact {fact}")


def delete_fact(
    agent: Agent,
    fact: Annotated[str, typer.Option("--fact", help="a fact id")],
    actor: Actor = None,
    as_json: Json = False,
) -> None:
    """Delete a fact: recorded as a retraction by the user (history keeps it)."""
    with _user_errors():
        check_agent_id(agent)
        with _memory() as memory:
            result = memory.delete_fact(agent, fact, actor=actor, via="cli")
            memory.wait_for_projections(result.position, agent_id=agent)
    typer.echo(result.model_dump_json() if as_json else f"retracted {fact} (position {result.position})")


def forget_agent(
    agent: Agent,
    actor: Actor = None,
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
    as_json: Json = False,
) -> None:
    """Forget everything about an agent: end all its facts, hide its messages (one event)."""
    with _user_errors():
        check_agent_id(agent)
        if not yes and not typer.confirm(f"End all facts of {agent!r} and hide its messages?"):
            raise typer.Exit(1)
        with _memory() as memory:
            result = memory.forget_agent(agent, actor=actor, via="cli")
            memory.wait_for_projections(result.position, agent_id=agent)
    typer.echo(
        result.model_dump_json()
        if as_json
        else f"forgot {agent}: {result.facts_ended} facts ended (position {result.position})"
    )


def erase(
    agent: Agent,
    actor: Actor = None,
    yes: Annotated[bool, typer.Option("--yes", help="do not ask for confirmation")] = False,
    as_json: Json = False,
) -> None:
    """Erase an agent for good (crypto-shredding, ADR-0018): destroy its data key and drop
    its read-model rows; its events stay in the log, unreadable. Irreversible."""
    with _user_errors():
        check_agent_id(agent)
        if not yes and not typer.confirm(
            f"Erase {agent!r} irreversibly (its memory becomes unreadable, its id unusable)?"
        ):
            raise typer.Exit(1)
        with _memory() as memory:
            attach_nats(memory)  # the erase reaches the NATS streams too (issue 28)
            result = memory.erase_agent(agent, actor=actor, via="cli")
            memory.wait_for_projections(result.position or None, agent_id=agent)
    typer.echo(
        result.model_dump_json()
        if as_json
        else f"erased {agent}: {result.aggregates} aggregates unreadable, "
        f"{result.read_model_rows_deleted} read-model rows deleted"
        + (" (was already erased)" if result.already_erased else "")
    )


def list_entities(agent: Agent, limit: Limit = 50, cursor: Cursor = None, as_json: Json = False,
                  metadata: Metadata = None) -> None:
    """List an agent's entities."""
    with _user_errors():
        check_agent_id(agent)
        tree = parse_metadata(metadata)
        with _memory() as memory:
            page = memory.list_entities(agent, limit=limit, cursor=cursor, metadata=tree)
    _show_page(page, as_json, lambda e: f"{e.entity_key}  {e.display_name}  "
               f"({e.entity_type}, {e.active_facts} active facts)")


def list_agents(limit: Limit = 50, cursor: Cursor = None, as_json: Json = False) -> None:
    """List every agent with memory."""
    with _user_errors(), _memory() as memory:
        page = memory.list_agents(limit=limit, cursor=cursor)
    _show_page(page, as_json, lambda a: f"{a.agent_id}  {a.active_facts} active facts, "
               f"{a.messages} messages" + (" (forgotten)" if a.forgotten_at else ""))


def list_messages(
    agent: Agent,
    session: Annotated[str | None, typer.Option(help="only this conversation id")] = None,
    speaker: Annotated[str | None, typer.Option(help="only turns of this speaker")] = None,
    limit: Limit = 50,
    cursor: Cursor = None,
    as_json: Json = False,
    metadata: Metadata = None,
) -> None:
    """List an agent's recorded messages (hidden ones marked)."""
    with _user_errors():
        check_agent_id(agent)
        tree = parse_metadata(metadata)
        with _memory() as memory:
            page = memory.list_messages(
                agent, session=session, speaker=speaker, limit=limit, cursor=cursor, metadata=tree
            )
    _show_page(page, as_json, lambda m: f"{m.message_id}  {m.occurred_at:%Y-%m-%d %H:%M}  "
               f"{m.speaker or '?'}: {m.text}" + ("  (hidden)" if m.hidden else ""))


COMMANDS = (write, list_facts, get_fact, delete_fact, forget_agent, erase, list_entities,
            list_agents, list_messages)


def register(app: typer.Typer) -> None:
    """Add the management commands to the ``engramdb`` app."""
    for command in COMMANDS:
        app.command(name=command.__name__.replace("_", "-"))(command)
