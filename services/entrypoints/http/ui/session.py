"""Who is looking (ADR-0044): the inspector's login, session cookie and CSRF token.

The HTTP API takes a bearer key per request; a browser cannot send one without keeping it in
script-readable storage or a URL, so the inspector trades the key, once, in a POST body, for a
random session id in a cookie that script cannot read (HttpOnly), that no other site's request
carries (SameSite=Strict) and that expires (``SESSION_SECONDS``). The key itself is kept
nowhere: the session holds the ``Grant`` it resolved to. Sessions live in this process's
memory (a restart logs everyone out; several processes behind one address need sticky
routing), bounded in number.

Without configured keys the API is open and ``check_bind`` keeps it on loopback; the inspector
then admits loopback clients only, and shows anyone else the login page, never data.

CSRF: every form carries the token of a ``engramdb_ui_csrf`` cookie (double submit); a
state-changing request whose form token differs, or whose ``Origin`` is another site's, is a
403. With SameSite=Strict cookies that is defence in depth, not the only line.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from engramdb.infra.api_keys import Grant, KeyRing
from engramdb.services.entrypoints.http.auth import OPEN, is_loopback

SESSION_COOKIE = "engramdb_ui_session"
CSRF_COOKIE = "engramdb_ui_csrf"
SESSION_SECONDS = 8 * 3600
MAX_SESSIONS = 10_000
COOKIE_PATH = "/ui"


class LoginRequired(Exception):
    """No usable session: the caller gets the login page (401), not data."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


class Forbidden(Exception):
    """A known caller asked for what its key does not allow (403 page)."""


@dataclass
class Session:
    grant: Grant
    expires: float


class Sessions:
    """Session id -> grant, in memory, expiring; the oldest go first past ``MAX_SESSIONS``."""

    def __init__(self) -> None:
        self._by_id: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, grant: Grant) -> str:
        sid = secrets.token_urlsafe(32)
        now = time.monotonic()
        with self._lock:
            for key in [k for k, s in self._by_id.items() if s.expires <= now]:
                del self._by_id[key]
            while len(self._by_id) >= MAX_SESSIONS:
                del self._by_id[next(iter(self._by_id))]
            self._by_id[sid] = Session(grant, now + SESSION_SECONDS)
        return sid

    def find(self, sid: str | None) -> Grant | None:
        if not sid:
            return None
        with self._lock:
            session = self._by_id.get(sid)
            if session is None:
                return None
            if session.expires <= time.monotonic():
                del self._by_id[sid]
                return None
            return session.grant

    def close(self, sid: str | None) -> None:
        with self._lock:
            self._by_id.pop(sid or "", None)


def sessions_of(request: Request) -> Sessions:
    store: Sessions | None = getattr(request.app.state, "ui_sessions", None)
    if store is None:
        store = request.app.state.ui_sessions = Sessions()
    return store


def keyring_of(request: Request) -> KeyRing | None:
    ring: KeyRing | None = getattr(request.app.state, "keyring", None)
    return ring or None


def client_is_loopback(request: Request) -> bool:
    host = request.client.host if request.client else ""
    return bool(host) and is_loopback(host)


def current_grant(request: Request) -> Grant:
    """The caller's grant; ``LoginRequired`` when there is none (see the module doc)."""
    if keyring_of(request) is None:
        if client_is_loopback(request):
            return OPEN
        raise LoginRequired("this server has no API keys: the inspector answers loopback only")
    grant = sessions_of(request).find(request.cookies.get(SESSION_COOKIE))
    if grant is None:
        raise LoginRequired()
    return grant


def login(request: Request, key: str) -> tuple[Grant, str] | None:
    """The grant and a new session id for ``key``; ``None`` if the key is unknown or can
    read nothing."""
    ring = keyring_of(request)
    if ring is None:
        return None
    grant = ring.find(key)
    if grant is None or not grant.allows("read"):
        return None
    return grant, sessions_of(request).open(grant)


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def set_session_cookie(response: Response, request: Request, sid: str) -> None:
    response.set_cookie(
        SESSION_COOKIE, sid, max_age=SESSION_SECONDS, path=COOKIE_PATH, httponly=True,
        samesite="strict", secure=_secure(request),
    )


def clear_session_cookie(response: Response, request: Request) -> None:
    response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict",
                           secure=_secure(request))


# ----- CSRF -------------------------------------------------------------------------------


def csrf_token(request: Request) -> str:
    """The caller's CSRF token (from its cookie, or a new one ``ensure_csrf_cookie`` sets)."""
    token = request.cookies.get(CSRF_COOKIE)
    if not token or len(token) < 32:
        token = getattr(request.state, "new_csrf", None) or secrets.token_urlsafe(32)
        request.state.new_csrf = token
    return token


def ensure_csrf_cookie(response: Response, request: Request) -> None:
    new = getattr(request.state, "new_csrf", None)
    if new:
        response.set_cookie(CSRF_COOKIE, new, max_age=SESSION_SECONDS, path=COOKIE_PATH,
                            httponly=True, samesite="strict", secure=_secure(request))


def check_csrf(request: Request, submitted: str | None) -> None:
    """403 (``Forbidden``) unless the form's token matches the cookie's and the request comes
    from this origin (when the browser says where it comes from)."""
    cookie = request.cookies.get(CSRF_COOKIE) or ""
    if not cookie or not submitted or not hmac.compare_digest(cookie, submitted):
        raise Forbidden("the form's CSRF token is missing or stale: reload the page and retry")
    origin = request.headers.get("origin")
    if origin and origin != "null":
        expected = f"{request.url.scheme}://{request.url.netloc}"
        if origin != expected:
            raise Forbidden("the request comes from another origin")
