"""Rendering the inspector's pages: Jinja2 with autoescape always on, the page headers
(CSP without inline script, no framing, no caching, no sniffing), and the filters that keep
untrusted text inert — every memory text is user input (ADR-0044).

Why filters and not trust in autoescape alone: escaping stops markup, not a bidi override
(U+202E) that reorders the rest of a line, nor a 100 kB line that makes a table unusable. So
texts are shown inside ``<bdi>`` (bidi-isolated) and clipped in lists (``clip``); links are
only ever built from our routes with each path segment percent-encoded (``seg``), never from
stored text.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from engramdb.services.entrypoints.http.ui.session import csrf_token, ensure_csrf_cookie
from engramdb.services.management.models import encode_cursor

HERE = Path(__file__).parent
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def seg(value: Any) -> str:
    """One URL path segment: every character that is not unreserved percent-encoded."""
    return quote(str(value), safe="")


# bidi embeddings, overrides and isolates, and the invisible marks: shown, never obeyed
_BIDI = {c: f"[U+{c:04X}]" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E,
                                     0x200F, 0x061C)}


def clip(value: Any, limit: int = 300) -> str:
    """Untrusted text for display: bidi controls made visible (``[U+202E]``), cut at
    ``limit`` characters with an ellipsis."""
    text = "" if value is None else str(value)
    text = text if len(text) <= limit else text[:limit] + "…"
    return text.translate(_BIDI)


def when(value: datetime | None) -> str:
    """A time as ``2026-03-28 14:00:05.123 UTC`` (what people read; milliseconds because
    one conversation's decisions are often within a second)."""
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def iso(value: datetime | None) -> str:
    """A time exactly (microseconds, UTC offset): what a form sends back."""
    return "" if value is None else value.astimezone(UTC).isoformat()


def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str, sort_keys=True)


def starting_at(moment: datetime | None) -> str | None:
    """A conversation cursor whose page starts at ``moment`` (the message there included):
    the list is keyset-paged on (occurred_at, message_id) and every id sorts after ''."""
    return None if moment is None else encode_cursor(moment, "")


def query(**params: Any) -> str:
    """``?a=1&b=2`` of the non-empty parameters (for pagination links)."""
    kept = {k: v for k, v in params.items() if v not in (None, "")}
    return "?" + urlencode(kept) if kept else ""


env = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
env.filters.update(seg=seg, clip=clip, when=when, iso=iso, pretty=pretty)
env.globals.update(query=query, starting_at=starting_at)


def page(request: Request, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    """Render ``template`` with the caller's CSRF token and the page headers."""
    grant = getattr(request.state, "ui_grant", None)
    html = env.get_template(template).render(
        csrf=csrf_token(request), grant=grant, path=request.url.path, **context
    )
    response = HTMLResponse(html, status_code=status, headers=PAGE_HEADERS)
    ensure_csrf_cookie(response, request)
    return response
