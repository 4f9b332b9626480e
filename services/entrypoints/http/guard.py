"""Input guards of the HTTP API: a request-body cap (413) and error bodies that always render.

Why a cap: without one a client could make the server parse a 10 MB (or 10 GB) JSON body;
the largest valid request is a message of 64 KiB of text plus 16 KiB of metadata, so the
default cap of 1 MiB (``ENGRAMDB_HTTP_MAX_BODY_BYTES``) leaves ample room. The body is read
up to the cap and then replayed to the app, so a client that omits ``Content-Length`` (chunked
upload) is capped too.

Why a sanitising 422 handler: FastAPI's default one echoes the offending input, and a lone
UTF-16 surrogate (``"\\ud800"``) or a NaN in it cannot be encoded as JSON, so the error
response itself failed with a 500 (issue 10). Here nothing is echoed raw: strings that are not
valid Unicode are escaped and non-finite numbers become strings.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

DEFAULT_MAX_BODY_BYTES = 1024 * 1024

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def json_safe(value: Any) -> Any:
    """``value`` with every string valid UTF-8 and every float finite (echo-safe JSON)."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {json_safe(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return json_safe(str(value))


def error_response(status: int, loc: list[Any], msg: str, kind: str) -> JSONResponse:
    return JSONResponse(status_code=status, content=json_safe({"detail": [{"loc": loc, "msg": msg, "type": kind}]}))


class BodyLimit:
    """ASGI middleware: a request body over ``max_bytes`` is a 413 before the app sees it."""

    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, receive, send, int(declared))
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([message], receive), send)
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(scope, receive, send, size)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay([body], receive), send)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, size: int) -> None:
        response = error_response(
            413, ["body"],
            f"request body is {'at least ' if size > self.max_bytes else ''}{size} bytes; the limit is "
            f"{self.max_bytes} (ENGRAMDB_HTTP_MAX_BODY_BYTES); send one message per request",
            "body_too_large",
        )
        await response(scope, receive, send)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


def install_input_guards(app: FastAPI, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
    """Add the body cap and the echo-safe 422 handler to ``app``."""
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)  # type: ignore[arg-type]

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        details = [
            {"loc": list(err.get("loc", ())), "msg": str(err.get("msg", "")), "type": str(err.get("type", "value_error"))}
            for err in exc.errors()
        ]
        return JSONResponse(status_code=422, content=json_safe({"detail": details}))


__all__ = ["DEFAULT_MAX_BODY_BYTES", "BodyLimit", "error_response", "install_input_guards", "json_safe"]
