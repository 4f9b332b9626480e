"""Who may call the HTTP API (ADR-0011): bearer API keys scoped to agents and read/write/admin,
a trusted-host check, and the rule that a non-loopback bind needs keys.

With no keys configured every caller is allowed: that is the zero-config loopback default,
and ``check_bind`` makes sure it stays loopback-only. With keys, a missing or unknown key is
a 401 and a known key outside its agents or scopes a 403. The agent check runs inside each
handler, on the validated request (body or path), so what is checked is what is used.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.middleware.trustedhost import TrustedHostMiddleware

from engramdb.infra.api_keys import Grant, KeyRing

LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
_WILDCARD_BINDS = ("0.0.0.0", "::", "")

bearer = HTTPBearer(
    auto_error=False,
    description="An engramdb API key (`engramdb keys create`); not needed on a loopback "
    "server without configured keys.",
)

OPEN = Grant(key_id="open", sha256="", agents=("*",), scopes=frozenset({"admin"}))


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(status_code=401, detail=detail, headers={"WWW-Authenticate": "Bearer"})


def require(scope: str) -> Callable[..., Awaitable[Grant]]:
    """Route dependency: authenticate (401) and check the key has ``scope`` at all (403)."""

    async def dependency(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    ) -> Grant:
        ring: KeyRing | None = getattr(request.app.state, "keyring", None)
        if not ring:
            return OPEN
        if credentials is None:
            raise _unauthorized("missing API key: send 'Authorization: Bearer <key>'")
        grant = ring.find(credentials.credentials)
        if grant is None:
            raise _unauthorized("unknown API key")
        if not grant.allows(scope):
            raise HTTPException(status_code=403, detail=f"this API key lacks the {scope!r} scope")
        return grant

    return dependency


def check_key(request: Request) -> None:
    """401 unless the request carries a known key (or the server is open): for checks that
    run before a route's own dependencies, so a stranger learns nothing first (ADR-0011)."""
    ring: KeyRing | None = getattr(request.app.state, "keyring", None)
    if not ring:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _unauthorized("missing API key: send 'Authorization: Bearer <key>'")
    if ring.find(token.strip()) is None:
        raise _unauthorized("unknown API key")


def authorize(grant: Grant, scope: str, agent_id: str) -> None:
    """403 unless ``grant`` holds ``scope`` for ``agent_id``."""
    if not grant.allows(scope, agent_id):
        raise HTTPException(
            status_code=403, detail=f"this API key may not {scope} agent {agent_id!r}"
        )


def is_loopback(host: str) -> bool:
    return host.strip("[]").lower() in LOOPBACK_HOSTS or host.startswith("127.")


def check_bind(host: str, ring: KeyRing) -> None:
    """Refuse a non-loopback bind without keys (raise SystemExit with what to set)."""
    if not ring and not is_loopback(host):
        raise SystemExit(
            f"refusing to serve HTTP on {host} without API keys: set ENGRAMDB_API_KEYS "
            "(create one with `engramdb keys create --agents '*' --scope admin`) "
            "or bind ENGRAMDB_HTTP_HOST=127.0.0.1"
        )


def allowed_hosts(bind_host: str, extra: str = "") -> list[str]:
    """Host headers accepted: loopback names, the bind host (unless a wildcard) and
    ``ENGRAMDB_HTTP_ALLOWED_HOSTS`` (comma-separated; ``*.example.com`` and ``*`` work)."""
    hosts = ["localhost", "127.0.0.1", "[::1]", "::1"]
    if bind_host not in _WILDCARD_BINDS:
        hosts.append(f"[{bind_host}]" if ":" in bind_host else bind_host)
    hosts += [h.strip() for h in extra.split(",") if h.strip()]
    return list(dict.fromkeys(hosts))


def secure(app: FastAPI, ring: KeyRing | None, hosts: list[str] | None = None) -> FastAPI:
    """Attach the key ring (``None``/empty: open) and, if given, the trusted-host check."""
    app.state.keyring = ring
    if hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=hosts)
    return app
