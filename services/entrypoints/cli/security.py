"""``engramdb keys …`` (HTTP API keys) and ``engramdb nats-user …`` (NATS publisher
identities): the commands that hand out credentials (ADR-0011). A secret is printed once and
only its hash (keys) or the server-side config (NATS) is kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

keys_app = typer.Typer(no_args_is_help=True, help="HTTP API keys (Authorization: Bearer).")
nats_user_app = typer.Typer(no_args_is_help=True, help="NATS publisher identities.")


def _split(values: list[str]) -> list[str]:
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _keys_file(file: Path | None) -> Path:
    from engramdb.infra.api_keys import default_keys_path
    from engramdb.infra.settings import load_settings

    if file is not None:
        return file
    settings = load_settings()
    value = (settings.api_keys or "").strip()
    if value.startswith(("[", "{")):
        raise typer.BadParameter(
            "ENGRAMDB_API_KEYS holds inline JSON, which this command cannot extend: "
            "pass --file keys.json and put that file's content (hashes only) there"
        )
    if value:
        return Path(value).expanduser()
    return default_keys_path(settings.data_dir)


@keys_app.command("create")
def keys_create(
    agents: Annotated[list[str], typer.Option("--agents", help="agent ids or prefixes: 'a:*', '*'")],
    scope: Annotated[list[str], typer.Option("--scope", help="read | write | admin (repeatable)")],
    note: Annotated[str, typer.Option(help="what the key is for")] = "",
    file: Annotated[Path | None, typer.Option(help="keys file (default: ENGRAMDB_API_KEYS "
                                              "or <data_dir>/api-keys.json)")] = None,
) -> None:
    """Create an API key: prints it once; the keys file keeps only its SHA-256."""
    from engramdb.infra.api_keys import ApiKeyConfigError, add_key

    path = _keys_file(file)
    try:
        key, grant = add_key(path, _split(agents), _split(scope), note)
    except ApiKeyConfigError as exc:
        raise typer.BadParameter(str(exc)) from None
    typer.echo(key)
    typer.echo(
        f"key {grant.key_id}: {', '.join(sorted(grant.scopes))} on {', '.join(grant.agents)} "
        f"(hash stored in {path}; restart `engramdb serve` to load it)",
        err=True,
    )


@keys_app.command("list")
def keys_list(file: Annotated[Path | None, typer.Option(help="keys file")] = None) -> None:
    """List configured keys (ids, agents, scopes; never the keys)."""
    from engramdb.infra.api_keys import load_keyring, read_keys_file
    from engramdb.infra.settings import load_settings

    settings = load_settings()
    ring = read_keys_file(file) if file else load_keyring(settings.api_keys, settings.data_dir)
    if not ring.grants:
        where = file or settings.api_keys or settings.data_dir / "api-keys.json"
        typer.echo(f"no API keys (looked in {where}); the HTTP API is open to local callers only. "
                   "Create one with `engramdb keys create --agents A --scope read`")
    for grant in ring.grants:
        typer.echo(f"{grant.key_id}  {','.join(sorted(grant.scopes)):<16} "
                   f"{','.join(grant.agents)}  {grant.note}")


@nats_user_app.command("create")
def nats_user_create(
    agent: Annotated[list[str], typer.Option("--agent", help="agent id (repeatable)")],
) -> None:
    """Add a publisher user to the embedded NATS: publish and retrieve for these agents only."""
    from engramdb.infra.settings import load_settings
    from engramdb.services.entrypoints.nats.users import create_publisher

    try:
        pub = create_publisher(load_settings(), _split(agent))
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    typer.echo(json.dumps({"url": pub.url, "user": pub.user, "password": pub.password,
                           "inbox_prefix": pub.inbox_prefix, "agents": list(pub.agents)},
                          indent=2))


@nats_user_app.command("permissions")
def nats_user_permissions(
    user: Annotated[str, typer.Option("--user", help="the user name on your NATS server")],
    agent: Annotated[list[str], typer.Option("--agent", help="agent id (repeatable)")],
) -> None:
    """Print the NATS permissions block for a publisher user of an external NATS server."""
    from engramdb.infra.settings import load_settings
    from engramdb.services.entrypoints.nats.users import permissions_for

    perms = permissions_for(user, _split(agent), load_settings().subject_prefix)
    typer.echo(json.dumps({"user": user, "permissions": perms}, indent=2))
