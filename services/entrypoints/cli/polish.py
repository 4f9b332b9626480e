"""What every ``engramdb`` command shares in how it talks to a person (issue 27, ADR-0050).

- Flags are shown as flags: Typer's help printed ``--json <bool>``, which reads as if a value
  followed (``--json true "query"`` then fails, "true" taken as the query).
- Help text is plain: docstrings are written for Sphinx (````--json````) and Typer printed
  the double backticks as they are.
- A misspelled ``ENGRAMDB_*`` variable is a warning with the closest real name
  (``infra/settings_check.py``), not silence and the embedded database.
- No colour codes when stderr/stdout is not a terminal (logs redirected to a file), and
  ``NO_COLOR`` is honoured.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import typer
from typer.core import TyperOption


def _flag_type(self: TyperOption, ctx: Any) -> str | None:
    if self.is_flag:
        return None  # a flag takes no value: show none
    return _option_type(self, ctx)


_option_type = TyperOption.display_type_rich


def install_help_fixes() -> None:
    """Patch Typer's option-type column once (idempotent)."""
    if TyperOption.display_type_rich is not _flag_type:
        TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]


def plain_help(command: Any) -> None:
    """Replace reST double backticks by single ones in a command tree's help texts."""
    for attr in ("help", "short_help", "epilog"):
        text = getattr(command, attr, None)
        if isinstance(text, str):
            setattr(command, attr, text.replace("``", "`"))
    for param in command.params:
        if isinstance(getattr(param, "help", None), str):
            param.help = param.help.replace("``", "`")  # type: ignore[attr-defined]
    for sub in (getattr(command, "commands", None) or {}).values():  # Typer vendors click:
        plain_help(sub)  # its groups are no click.Group


def colour_allowed() -> bool:
    """Colour only on a terminal and without ``NO_COLOR`` (https://no-color.org)."""
    return not os.environ.get("NO_COLOR") and sys.stderr.isatty() and sys.stdout.isatty()


def plain_logs() -> None:
    """FastStream's log formatter colours the level name always (``use_colors=True`` is hard
    coded); off the terminal that wrote escape codes into every log file. Called by the
    commands that run FastStream (serve, demo): importing it costs ~1 s."""
    if colour_allowed():
        return
    from faststream._internal.logger.formatter import ColourizedFormatter

    ColourizedFormatter.use_colors = property(  # type: ignore[assignment,misc]
        lambda _self: False, lambda _self, _value: None
    )


def history_line(entry: Any) -> str:
    """One decision of ``engramdb history`` as text (``--json`` keeps every field)."""
    when = entry.recorded_at.isoformat(timespec="seconds")
    subject = entry.fact_id or entry.entity_key or ""
    target = f" (was {entry.target_fact_id})" if entry.target_fact_id and entry.decision == "UPDATE" else ""
    source = f"  [message {entry.message_id}]" if entry.message_id else ""
    reason = f"  ({entry.reason})" if entry.reason else ""
    return f"v{entry.version:<4} {when}  {entry.decision:<12} {subject} {entry.text or ''}{target}{source}{reason}"


def warn_unknown_settings(environ: Any = None) -> None:
    from engramdb.infra.settings_check import unknown_variables

    for line in unknown_variables(os.environ if environ is None else environ):
        typer.echo(line, err=True)


def build(app: typer.Typer) -> Any:
    """The click command of ``app`` with the fixes above, ready to run."""
    install_help_fixes()
    if not colour_allowed():
        os.environ.setdefault("NO_COLOR", "1")  # rich, uvicorn's and click's styling honour it
    command = typer.main.get_command(app)
    plain_help(command)
    return command
