"""A user's mistake as one line: what the CLI prints (``error: ...`` on stderr, exit code 2)
and what an MCP tool answers — never a traceback.

Mistakes are ``ValueError``/``LookupError`` (pydantic's ``ValidationError`` included: bad
agent id, unknown fact, bad cursor or time, unknown projection) and an unreachable database
(``psycopg.OperationalError``, e.g. ``ENGRAMDB_DATABASE_URL`` pointing at a closed port);
a ``SystemExit`` carrying a message (how services refuse a bad configuration) and an embedded
server that cannot start (``EmbeddedServerError``, e.g. a data dir the server's user cannot
reach; issue 27), a memory embedded with another model than the configured one
(``EmbeddingModelMismatch``) and a model that is not installed (``ProviderUnavailable``) also
become one ``error:`` line and exit code 2 — for every command.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer


def one_line(exc: BaseException) -> str:
    """The exception's message on one line (pydantic errors as ``field: message; ...``)."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return "; ".join(
            f"{'.'.join(str(x) for x in e['loc']) or 'input'}: {e['msg']}"
            for e in exc.errors(include_url=False, include_input=False)
        )
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    return " ".join(str(text).split())


_MISTAKES: tuple[type[Exception], ...] = (ValueError, LookupError)


@contextmanager
def cli_user_errors(mistakes: tuple[type[Exception], ...] = _MISTAKES) -> Iterator[None]:
    """Turn a user's mistake inside the block into ``error: ...`` on stderr and exit 2.

    ``mistakes=()`` for long-running commands (serve, demo): there a ``ValueError`` from deep
    inside is more likely a bug, whose traceback must not be reduced to one line."""
    import psycopg

    from engramdb.infra.embedded_base import EmbeddedServerError
    from engramdb.infra.providers.errors import ProviderUnavailable
    from engramdb.projections.read_model import EmbeddingModelMismatch

    try:
        yield
    except (EmbeddedServerError, EmbeddingModelMismatch, ProviderUnavailable) as exc:
        # the machine's state, not a bug (a server that cannot start, a memory embedded with
        # another model, a model that is not installed): its message says what to do
        typer.echo(f"error: {one_line(exc)}", err=True)
        raise typer.Exit(2) from None
    except mistakes as exc:
        typer.echo(f"error: {one_line(exc)}", err=True)
        raise typer.Exit(2) from None
    except SystemExit as exc:  # a refusal with its reason (bad role, unsafe bind, key file)
        if not isinstance(exc.code, str):
            raise
        typer.echo(f"error: {exc.code}", err=True)
        raise typer.Exit(2) from None
    except psycopg.OperationalError as exc:
        typer.echo(
            f"error: cannot reach the database ({one_line(exc)}); "
            "check ENGRAMDB_DATABASE_URL or unset it for the embedded default",
            err=True,
        )
        raise typer.Exit(2) from None
