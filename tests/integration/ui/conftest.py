"""Fixtures of the inspector's tests: a real ``Memory`` on its own schema of the session's
PostgreSQL, holding the demo conversation (Ana moves from Recife to Porto Alegre), served by
real uvicorn servers (open on loopback, and with API keys), and Debian's chromium driven by
Playwright on the system executable (no browser download, ever)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from engramdb.infra.api_keys import KeyRing
from engramdb.infra.database import es_env_from_url
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.cli.demo import AGENT, CONVERSATION
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.entrypoints.http.auth import secure
from engramdb.services.memory.facade import Memory
from tests.support.live_http import serving

READ_KEY = "read-" + uuid.uuid4().hex
ADMIN_KEY = "admin-" + uuid.uuid4().hex
INSTALL_HINT = "install Debian's chromium: apt-get install chromium"
# The README's screenshots are refreshed only when asked (ENGRAMDB_TEST_UI_SCREENSHOTS=1): every
# run renders new times into the pages, and a test run must not dirty the checkout. Otherwise
# the same screenshots are taken into a throwaway directory (the capture is still exercised).
SHOTS = (
    Path(__file__).resolve().parents[3] / "docs" / "img"
    if os.environ.get("ENGRAMDB_TEST_UI_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "engramdb-ui-screenshots"
)


def chromium_path() -> str | None:
    """``ENGRAMDB_TEST_CHROMIUM`` if set (an executable path), else Debian's chromium on PATH."""
    explicit = os.environ.get("ENGRAMDB_TEST_CHROMIUM")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def ui_schema(pg_url: str) -> Iterator[tuple[str, dict[str, str]]]:
    name = f"ui_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    yield name, es_env_from_url(pg_url, name)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def ui_memory(ui_schema: tuple[str, dict[str, str]]) -> Iterator[Memory]:
    """The demo conversation, turn by turn through the write path (as ``engramdb demo``)."""
    _schema, env = ui_schema
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as memory:
        for i, (session, speaker, text) in enumerate(CONVERSATION, start=1):
            memory.write(AGENT, text, speaker=speaker, session_id=session, message_id=f"demo-{i}")
            time.sleep(0.02)  # distinct decision instants for the time-travel control
        memory.wait_for_projections()
        yield memory


@pytest.fixture(scope="module")
def open_server(ui_memory: Memory) -> Iterator[str]:
    """The HTTP API + inspector without keys (the loopback default)."""
    with serving(create_app(ui_memory)) as url:
        yield url


@pytest.fixture(scope="module")
def keyed_server(ui_memory: Memory) -> Iterator[str]:
    """The same memory behind API keys: a read-scope key and an admin key."""
    ring = KeyRing.parse([
        {"id": "reader", "key": READ_KEY, "agents": ["*"], "scopes": ["read"]},
        {"id": "boss", "key": ADMIN_KEY, "agents": ["*"], "scopes": ["admin"]},
    ], "test")
    with serving(secure(create_app(ui_memory), ring)) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Debian chromium through Playwright; skipped with how to install it when
    missing — a failure instead where ``ENGRAMDB_TEST_REQUIRE_BROWSER=1`` (CI). Module-scoped:
    Playwright's sync API holds an event loop on this thread while it runs, which the async
    tests of later modules (pytest-asyncio's session loop) must not meet."""
    required = os.environ.get("ENGRAMDB_TEST_REQUIRE_BROWSER") == "1"
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        executable = None
    if executable is None:
        if required:
            pytest.fail(f"browser tests are required here but no browser was found: {INSTALL_HINT}"
                        " (and `pip install -e '.[dev]'` for Playwright)")
        pytest.skip(f"no chromium on this machine: {INSTALL_HINT}")
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=executable, headless=True,
                                      args=["--no-sandbox", "--disable-gpu"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context (no cookies) with a desktop viewport; fails the test on any
    dialog (an ``alert`` would mean hostile text ran), page error or CSP violation (our own
    pages must need no exception to the policy)."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    tab = context.new_page()
    problems: list[str] = []
    tab.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    tab.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    tab.on("console", lambda m: problems.append(f"console: {m.text}")
           if "Content Security Policy" in m.text or "Refused to" in m.text else None)
    tab.problems = problems
    yield tab
    context.close()
    assert not problems, problems


def shot(page: Any, name: str) -> None:
    """Save a screenshot of the page (into docs/img with ENGRAMDB_TEST_UI_SCREENSHOTS=1: the
    README shows them)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"ui-{name}.png"), full_page=False)
