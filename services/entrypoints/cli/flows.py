"""CLI commands for memory that flows in from outside (ADR-0049): ``add-facts``.

``engramdb add-facts --agent A --file facts.jsonl`` records facts the client decided (one
JSON object per line, or one JSON array; ``-`` reads stdin), or one fact given inline with
``--subject`` and ``--text``. A malformed line is refused with its number and nothing is
recorded; a refused fact (empty text, unknown source, validity out of range) names the fact.
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
            raw = sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
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


def register(app: typer.Typer) -> None:
    app.command("add-facts")(add_facts)
