"""``engramdb ui``: the web inspector alone (ADR-0044) — the HTTP API with ``/ui`` on it,
against whatever deployment the settings name (``ENGRAMDB_DATABASE_URL``…, else the embedded
default), with the same keys and bind rule as ``engramdb serve``: off loopback it needs
``ENGRAMDB_API_KEYS``. Its projectors join the per-cell election (ADR-0020), so an action's
result is visible at once whether or not a ``serve`` is running beside it."""

from __future__ import annotations

import webbrowser
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def ui(
        host: Annotated[str | None, typer.Option(help="bind address (default ENGRAMDB_HTTP_HOST)")] = None,
        port: Annotated[int, typer.Option(help="port")] = 8788,
        open_browser: Annotated[bool, typer.Option("--open", help="open a browser on it")] = False,
    ) -> None:
        """Serve the web inspector at http://HOST:PORT/ui (the HTTP API alongside)."""
        import uvicorn

        from engramdb.infra.api_keys import ApiKeyConfigError, load_keyring
        from engramdb.infra.database import resolve_nats
        from engramdb.infra.settings import load_settings
        from engramdb.services.entrypoints.http.api import create_app
        from engramdb.services.entrypoints.http.auth import allowed_hosts, check_bind, secure
        from engramdb.services.memory.facade import Memory

        settings = load_settings()
        bind = host or settings.http_host
        try:
            ring = load_keyring(settings.api_keys, settings.data_dir)
        except ApiKeyConfigError as exc:
            raise SystemExit(str(exc)) from None
        check_bind(bind, ring)
        with Memory.open(settings, quiet=True) as memory:
            memory.nats_url = resolve_nats(settings)  # health and the dead-letter stream
            app_ = secure(create_app(memory, max_body_bytes=settings.http_max_body_bytes), ring,
                          allowed_hosts(bind, settings.http_allowed_hosts))
            app_.state.subject_prefix = settings.subject_prefix
            shown = f"[{bind}]" if ":" in bind else bind
            typer.echo(f"engramdb inspector on http://{shown}:{port}/ui")
            if open_browser:
                webbrowser.open(f"http://{shown}:{port}/ui")
            uvicorn.run(app_, host=bind, port=port, log_level="info")
