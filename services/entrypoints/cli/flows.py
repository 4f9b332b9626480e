"""CLI commands for memory that flows in and out (ADR-0049): ``add-facts``, ``export``,
``import``.

``engramdb add-facts --agent A --file facts.jsonl`` records facts the client decided (one
JSON object per line, or one JSON array; ``-`` reads stdin), or one fact given inline with
``--subject`` and ``--text``. A malformed line is refused with its number and nothing is
recorded; a refused fact (empty text, unknown source, validity out of range) names the fact.
``engramdb export --agent A [--out a.jsonl]`` writes the agent's log (docs/export-format.md);
``engramdb import FILE`` replays one (``--from mem0`` a Mem0 ``get_all`` dump, ``--from
transcript`` an OpenAI-style transcript, both with ``--agent``). A refused file names its line
and nothing is imported; an erased agent exports nothing (and no file is created).
``register(app)`` adds the commands to the ``engramdb`` Typer app.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from engramdb.domain.agent_id import check_agent_id
from engramdb.services.entrypoints.user_errors import cli_user_errors

Agent = Annotated[str, typer.Option("--agent", help="agent id")]


def read_text(file: str) -> str:
    """The file's text (``-``: stdin); a missing or unreadable file is one ``error:`` line."""
    if file == "-":
        return sys.stdin.read()
    try:
        return Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {file}: {exc}") from None


def read_fact_lines(text: str, source: str) -> list[dict[str, Any]]:
    """Facts from a JSON array or JSONL text; ``ValueError`` naming the first bad line."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            items = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{source}: line {exc.lineno}: not JSON ({exc.msg})") from None
        lines = [(1, item) for item in items]
    else:
        lines = []
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                lines.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{source}: line {number}: not JSON ({exc.msg})") from None
    for number, item in lines:
        if not isinstance(item, dict):
            raise ValueError(f"{source}: line {number}: a fact is a JSON object")
    return [item for _n, item in lines]


def add_facts(
    agent: Agent,
    file: Annotated[str | None, typer.Option("--file", help="JSONL or JSON array of facts; - for stdin")] = None,
    subject: Annotated[str | None, typer.Option("--subject", help="one inline fact: its subject")] = None,
    text: Annotated[str | None, typer.Option("--text", help="one inline fact: its statement")] = None,
    source: Annotated[list[str] | None, typer.Option("--source", help="message id it rests on")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON document")] = False,
) -> None:
    """Record facts you decided (no extraction), reconciled ADD / UPDATE / NOOP."""
    with cli_user_errors():
        check_agent_id(agent)
        if (file is None) == (subject is None and text is None):
            raise ValueError("give --file, or --subject and --text for one fact")
        if file is not None:
            raw = read_text(file)
            facts = read_fact_lines(raw, "stdin" if file == "-" else file)
        else:
            facts = [{"subject": subject or "", "text": text or "", "sources": list(source or [])}]
        from engramdb.services.memory.facade import Memory

        with Memory.open(quiet=True) as memory:
            result = memory.add_facts(agent, facts, via="cli")
    if as_json:
        typer.echo(result.model_dump_json())
        return
    typer.echo(f"recorded at position {result.position}: batch {result.message_id}")
    for d in result.decisions:
        typer.echo(f"  {d.kind:<12} {d.fact_id or d.target_fact_id or d.entity_key or ''}  {d.text or ''}")
    for r in result.rejected:
        typer.echo(f"  REJECTED     {r.reason}")


def export(
    agent: Agent,
    out: Annotated[str | None, typer.Option("--out", help="file to write (default: stdout)")] = None,
) -> None:
    """Write an agent's log, decrypted, as engramdb-export JSONL (docs/export-format.md)."""
    with cli_user_errors():
        check_agent_id(agent)
        from engramdb.services.memory.facade import Memory

        with Memory.open(quiet=True) as memory:
            lines = memory.export_agent(agent)
            first = next(lines)  # refusals (erased, unknown) before any file exists
            target = open(out, "w", encoding="utf-8") if out else sys.stdout  # noqa: SIM115
            try:
                count = 0
                for line in (first, *lines):
                    target.write(line + "\n")
                    count += 1
            finally:
                if out:
                    target.close()
    if out:
        typer.echo(f"exported {count - 2} events of agent {agent} to {out}", err=True)


def import_file(
    file: Annotated[str, typer.Argument(help="the file to import; - for stdin")],
    source: Annotated[str, typer.Option("--from", help="engramdb | mem0 | transcript")] = "engramdb",
    agent: Annotated[str | None, typer.Option("--agent", help="agent id (mem0, transcript)")] = None,
    subject: Annotated[str, typer.Option("--subject", help="mem0: whom the memories are about")] = "user",
    session: Annotated[str | None, typer.Option("--session", help="transcript: its session id")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON document")] = False,
) -> None:
    """Import an engramdb export (idempotent), a Mem0 dump or a chat transcript."""
    with cli_user_errors():
        if source not in ("engramdb", "mem0", "transcript"):
            raise ValueError(f"--from {source!r}: one of engramdb, mem0, transcript")
        if source != "engramdb" and agent is None:
            raise ValueError(f"--from {source} needs --agent")
        if agent is not None:
            check_agent_id(agent)
        text = read_text(file)
        from engramdb.services.memory.facade import Memory

        with Memory.open(quiet=source != "transcript") as memory:
            if source == "engramdb":
                result: Any = memory.import_agent(text.splitlines())
                summary = (f"agent {result.agent_id}: {result.inserted} events imported, "
                           f"{result.already_present} already present")
            elif source == "mem0":
                assert agent is not None
                result = memory.import_mem0(agent, text, subject=subject)
                summary = f"agent {agent}: {sum(len(r.decisions) for r in result)} decisions from Mem0"
            else:
                assert agent is not None
                result = memory.import_transcript(agent, text, session_id=session)
                fresh = [r for r in result if not r.duplicate]
                summary = f"agent {agent}: {len(fresh)} turns written, {len(result) - len(fresh)} duplicates"
    if as_json:
        dump = [r.model_dump(mode="json") for r in result] if isinstance(result, list) else result.model_dump(mode="json")
        typer.echo(json.dumps(dump))
    else:
        typer.echo(summary)


webhooks_app = typer.Typer(no_args_is_help=True, help="Webhooks: changes POSTed to your URLs (ADR-0049).")


@webhooks_app.command("add")
def webhook_add(
    url: Annotated[str, typer.Argument(help="http(s) URL that receives the changes")],
    agent: Annotated[str | None, typer.Option("--agent", help="one agent's changes")] = None,
    prefix: Annotated[str | None, typer.Option("--agent-prefix", help="agents whose id starts so")] = None,
    attempts: Annotated[int, typer.Option("--max-attempts", help="deliveries tried before a dead letter")] = 8,
) -> None:
    """Register a webhook; prints its id and signing secret (shown only now)."""
    with cli_user_errors():
        from engramdb.services.memory.facade import Memory

        with Memory.open(quiet=True) as memory:
            hook = memory.add_webhook(url, agent_id=agent, agent_prefix=prefix, max_attempts=attempts)
    typer.echo(f"{hook.webhook_id}  secret {hook.secret}  (keep it: it is not shown again)")


@webhooks_app.command("list")
def webhook_list(
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON document")] = False,
) -> None:
    """The registered webhooks (no secrets)."""
    with cli_user_errors():
        from engramdb.services.memory.facade import Memory

        with Memory.open(quiet=True) as memory:
            hooks = memory.list_webhooks()
    if as_json:
        typer.echo(json.dumps([h.model_dump(mode="json") for h in hooks]))
        return
    for h in hooks:
        target = f"agent {h.agent_id}" if h.agent_id else f"prefix {h.agent_prefix!r}"
        typer.echo(f"{h.webhook_id}  {target}  {h.url}")


@webhooks_app.command("delete")
def webhook_delete(webhook_id: Annotated[str, typer.Argument(help="the id `webhooks add` printed")]) -> None:
    """Stop delivering to a webhook."""
    with cli_user_errors():
        from engramdb.services.memory.facade import Memory

        with Memory.open(quiet=True) as memory:
            if not memory.delete_webhook(webhook_id):
                raise LookupError(f"no webhook {webhook_id!r}")
    typer.echo(f"deleted {webhook_id}")


def register(app: typer.Typer) -> None:
    app.add_typer(webhooks_app, name="webhooks")
    app.command("add-facts")(add_facts)
    app.command("export")(export)
    app.command("import")(import_file)
