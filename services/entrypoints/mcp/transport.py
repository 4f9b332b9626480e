"""Running ``engramdb mcp``: stdio, or streamable HTTP behind the HTTP API's rules (ADR-0011).

Why our own gate rather than the SDK's auth: the SDK's bearer support is OAuth (an
authorization server, token verifier and protected-resource metadata); engramdb's keys are
static bearer keys with agent patterns and scopes (``infra/api_keys.py``). So the Starlette
app the SDK builds is wrapped in ``BearerGate`` — a missing or unknown key is a 401 before
the SDK sees the request — and each tool checks the key's grant for its agent and scope
(``mcp_server._check``: 403-equivalent tool error). Without keys the server is open, and
``check_bind`` refuses a non-loopback bind, exactly as ``engramdb serve`` does.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from engramdb.infra.api_keys import KeyRing
from engramdb.infra.key_reload import watch_keyring
from engramdb.infra.settings import Settings
from engramdb.services.entrypoints.http.auth import allowed_hosts, check_bind, is_loopback
from engramdb.services.entrypoints.mcp.stopping import StdioStopper
from engramdb.services.entrypoints.serve.shutdown import ShutdownRequest, SignalFreeServer

MCP_PATH = "/mcp"


class BearerGate:
    """ASGI wrapper: every HTTP request needs ``Authorization: Bearer <known key>`` (401
    otherwise) when ``ring`` has keys; with no keys it passes everything through."""

    def __init__(self, app: ASGIApp, ring: KeyRing) -> None:
        self.app = app
        self.ring = ring

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.ring:
            header = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or self.ring.find(token.strip()) is None:
                detail = "unknown API key" if header else "missing API key"
                await _unauthorized(send, f"{detail}: send 'Authorization: Bearer <key>'")
                return
        await self.app(scope, receive, send)


async def _unauthorized(send: Send, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b"Bearer"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def http_app(server: Any, host: str, ring: KeyRing, extra_hosts: str = "") -> ASGIApp:
    """The SDK's streamable-HTTP app at ``/mcp``, behind the trusted-host check and the gate.

    On loopback the SDK's own DNS-rebinding protection is on (it checks Host and Origin);
    on other binds the same ``ENGRAMDB_HTTP_ALLOWED_HOSTS`` list as the HTTP API applies."""
    from mcp.server.transport_security import TransportSecuritySettings

    security = None
    if not is_loopback(host):
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH, host=host, transport_security=security
    )
    gated: ASGIApp = BearerGate(app, ring)
    if not is_loopback(host):
        gated = TrustedHostMiddleware(gated, allowed_hosts=allowed_hosts(host, extra_hosts))
    return gated


def run_mcp(settings: Settings, transport: str, host: str, port: int, agent: str | None = None) -> None:
    """Serve until stopped. stdio: ``Memory`` opens inside the session (fd 1 is diverted
    then); http: it opens first, so a bad database or key file fails before the port opens.
    ``agent``: pin the server to one agent id or a ``prefix*`` (``strict.Pin``)."""
    from engramdb.services.entrypoints.mcp.server import build_server
    from engramdb.services.entrypoints.mcp.strict import Pin
    from engramdb.services.entrypoints.mcp.watched import open_watched

    pin = Pin.parse(agent)  # a ValueError (one line) before anything opens
    if transport == "stdio":
        stopper = StdioStopper()  # SIGTERM/SIGINT: close memory, exit 0 (issue 28)
        stopper.install()
        try:
            # the embedded PostgreSQL is restarted if it dies while the host keeps us (ADR-0051)
            build_server(open_memory=lambda: stopper.open(lambda: open_watched(settings)), pin=pin).run("stdio")
        except BaseExceptionGroup as group:  # the lifespan failed inside the SDK's task group
            raise _first_leaf(group) from None
        return
    ring = watch_keyring(settings.api_keys, settings.data_dir)  # follows the file (issue 28)
    check_bind(host, ring)
    import anyio
    import uvicorn

    # SIGTERM/SIGINT only ask uvicorn to stop, so Memory (and its embedded servers) closes
    # below and the exit is 0 (issue 28; uvicorn alone re-raises the signal and dies)
    with ShutdownRequest().installed() as shutdown, open_watched(settings) as memory:
        server = build_server(memory=memory, keyring=ring, pin=pin)
        app = http_app(server, host, ring, settings.http_allowed_hosts)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning")
        http = SignalFreeServer(config)
        shutdown.watch(http)
        if not shutdown.requested:
            anyio.run(http.serve)


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    """The first real exception in a (nested) group, so the CLI can report e.g. an
    unreachable database in one line instead of a task-group traceback."""
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first
