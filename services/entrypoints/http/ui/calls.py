"""What every inspector route does first and last: check the caller (``need``), call the
facade on a worker thread (``call``: the facade is synchronous) and turn the caller's
mistakes into an error page with a 4xx status — never a 500 or a traceback (ADR-0012).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import parse_qs

import anyio
from pydantic import ValidationError
from starlette.requests import Request

from engramdb.domain.erasure import AgentErasedError
from engramdb.domain.time_range import check_instant
from engramdb.infra.api_keys import Grant
from engramdb.services.entrypoints.http.ui.session import Forbidden, check_csrf, current_grant
from engramdb.services.management.models import NotActiveError, NotFoundError

T = TypeVar("T")
MAX_FORM_BYTES = 16 * 1024


class UIError(Exception):
    """An error page: ``status`` (4xx) and a sentence for the person looking."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def need(request: Request, scope: str, agent_id: str | None = None) -> Grant:
    """The caller's grant if it holds ``scope`` (for ``agent_id``); else ``Forbidden``."""
    grant = current_grant(request)
    request.state.ui_grant = grant
    if not grant.allows(scope, agent_id):
        what = f"{scope} agent {agent_id!r}" if agent_id else scope
        raise Forbidden(f"your key may not {what}")
    return grant


def may(request: Request, scope: str, agent_id: str | None = None) -> bool:
    """Whether the caller (already checked by ``need``) could do ``scope``: to show buttons."""
    grant: Grant | None = getattr(request.state, "ui_grant", None)
    return grant is not None and grant.allows(scope, agent_id)


def actor(grant: Grant) -> str:
    """Who asked, for the event's ``decided_by`` (the API names the key the same way)."""
    return "ui" if grant.key_id == "open" else f"key:{grant.key_id}"


async def call(request: Request, fn: Callable[[Any], T]) -> T:
    memory = request.app.state.memory
    try:
        return await anyio.to_thread.run_sync(lambda: fn(memory))
    except NotFoundError as exc:
        raise UIError(404, str(exc)) from exc
    except NotActiveError as exc:
        raise UIError(409, str(exc)) from exc
    except AgentErasedError as exc:
        raise UIError(410, str(exc)) from exc
    except ValidationError as exc:
        msgs = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}".lstrip(": ")
            for e in exc.errors(include_url=False, include_context=False, include_input=False)
        )
        raise UIError(400, msgs or "invalid input") from exc
    except (ValueError, TimeoutError) as exc:
        raise UIError(400, str(exc)) from exc


def instant(value: str | None, name: str) -> datetime | None:
    """A form's time: ISO-8601, UTC when it names no zone; a 400 page naming ``name`` if not."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    parsed = None
    for candidate in (text, text[:10] + text[10:].replace(" ", "+")):  # a '+' decoded as ' '
        try:
            parsed = datetime.fromisoformat(candidate)
            break
        except ValueError:
            continue
    if parsed is None:
        raise UIError(400, f"{name}: {value[:80]!r} is not an ISO-8601 time, "
                      "e.g. 2026-03-28 or 2026-03-28T14:00:00+00:00")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return check_instant(parsed, name)
    except ValueError as exc:
        raise UIError(400, str(exc)) from None


async def form(request: Request) -> dict[str, str]:
    """The urlencoded body of a POST (first value of each field), CSRF-checked."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise UIError(413, "form too large")
    try:
        fields = {k: v[0] for k, v in parse_qs(body.decode("utf-8"), strict_parsing=False).items()}
    except UnicodeDecodeError:
        raise UIError(400, "the form is not UTF-8") from None
    check_csrf(request, fields.get("csrf"))
    return fields
