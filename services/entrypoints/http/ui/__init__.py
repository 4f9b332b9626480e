"""The web inspector (issue 23, ADR-0044): server-rendered pages at ``/ui`` on the HTTP app,
on the same facade, data and keys as ``/v1``. ``mount_ui(app)`` is the one hook ``create_app``
calls; ``engramdb ui`` serves the API with it alone (``services/entrypoints/cli/ui.py``)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse

from engramdb.services.entrypoints.http.ui import (
    routes_audit,
    routes_browse,
    routes_login,
    routes_ops,
)
from engramdb.services.entrypoints.http.ui.calls import UIError
from engramdb.services.entrypoints.http.ui.render import page
from engramdb.services.entrypoints.http.ui.routes_login import login_page
from engramdb.services.entrypoints.http.ui.session import Forbidden, LoginRequired

PREFIX = "/ui"


def mount_ui(app: FastAPI) -> None:
    """Add the inspector's routes under ``/ui`` and its error pages (HTML, 4xx)."""
    for module in (routes_login, routes_browse, routes_audit, routes_ops):
        app.include_router(module.router, prefix=PREFIX)

    @app.exception_handler(LoginRequired)
    async def _login(request: Request, exc: LoginRequired) -> HTMLResponse:
        return login_page(request, status=401, error=exc.reason)

    @app.exception_handler(Forbidden)
    async def _forbidden(request: Request, exc: Forbidden) -> HTMLResponse:
        return page(request, "error.html", status=403, title="Not allowed", message=str(exc))

    @app.exception_handler(UIError)
    async def _error(request: Request, exc: UIError) -> HTMLResponse:
        return page(request, "error.html", status=exc.status, title="Cannot show this",
                    message=exc.message)


__all__ = ["PREFIX", "mount_ui"]
