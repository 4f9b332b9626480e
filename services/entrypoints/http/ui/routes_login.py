"""Logging in and out of the inspector (``session``'s module doc says why a cookie) and the
static files, served from a fixed list read once (no path from the URL reaches the disk)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from engramdb.services.entrypoints.http.ui.calls import form
from engramdb.services.entrypoints.http.ui.render import HERE, page
from engramdb.services.entrypoints.http.ui.session import (
    SESSION_COOKIE,
    clear_session_cookie,
    keyring_of,
    login,
    sessions_of,
    set_session_cookie,
)

router = APIRouter(include_in_schema=False)
_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".svg": "image/svg+xml"}
STATIC = {p.name: (p.read_bytes(), _TYPES[p.suffix]) for p in sorted((HERE / "static").iterdir())
          if p.suffix in _TYPES}


def login_page(request: Request, status: int = 401, error: str = "") -> HTMLResponse:
    return page(request, "login.html", status=status, title="Log in",
                keys_configured=keyring_of(request) is not None, error=error)


@router.get("/login", response_class=HTMLResponse)
async def show_login(request: Request) -> HTMLResponse:
    return login_page(request, status=200)


@router.post("/login")
async def do_login(request: Request) -> Response:
    fields = await form(request)
    found = login(request, fields.get("key", "").strip())
    if found is None:  # the key is never echoed nor logged
        return login_page(request, status=401, error="unknown API key, or one that may read nothing")
    _grant, sid = found
    response = RedirectResponse("/ui/agents", status_code=303)
    set_session_cookie(response, request, sid)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    await form(request)
    sessions_of(request).close(request.cookies.get(SESSION_COOKIE))
    response = RedirectResponse("/ui/login", status_code=303)
    clear_session_cookie(response, request)
    return response


@router.get("/static/{name}")
async def static(name: str) -> Response:
    found = STATIC.get(name)
    if found is None:
        return Response("not found", status_code=404, media_type="text/plain")
    body, kind = found
    return Response(body, media_type=kind, headers={
        "X-Content-Type-Options": "nosniff", "Cache-Control": "public, max-age=3600"})
