"""The inspector in a real browser (headless Debian chromium, Playwright): the issue's
scenarios end to end, each saving a screenshot of its page into docs/img/ (README)."""

from __future__ import annotations

import re
from typing import Any

import httpx
from conftest import ADMIN_KEY, READ_KEY, shot
from typer.testing import CliRunner

from engramdb.services.entrypoints.cli.demo import AGENT
from engramdb.services.entrypoints.cli.main import app as cli_app
from engramdb.services.memory.facade import Memory


def _goto(page: Any, url: str) -> Any:
    response = page.goto(url)
    assert response is not None
    return response


def test_lineage_from_agent_list_to_source_and_superseded_fact(page: Any, open_server: str) -> None:
    _goto(page, f"{open_server}/ui/agents")
    shot(page, "agents")
    page.get_by_role("link", name=AGENT, exact=True).click()
    page.wait_for_url(f"**/ui/agents/{AGENT}")
    shot(page, "agent-facts")
    row = page.locator("tr", has_text="Ana lives in Porto Alegre.")
    assert row.count() == 1
    row.locator("a").last.click()
    page.wait_for_url("**/facts/*")
    assert page.locator(".fact-text").inner_text() == "Ana lives in Porto Alegre."
    shot(page, "lineage")
    # the source message, then the conversation it is in
    source = page.locator("li.source")
    assert "I live in Porto Alegre." in source.inner_text()
    lineage_url = page.url
    source.locator("a.source-link").click()
    page.wait_for_url("**/conversation?session=s2*")
    assert page.locator("li.turn", has_text="I live in Porto Alegre.").count() == 1
    _goto(page, lineage_url)
    # follow "Supersedes" back until the Recife fact (the move went through an UPDATE chain)
    texts = []
    for _ in range(5):
        texts.append(page.locator(".fact-text").inner_text())
        if "Recife" in texts[-1]:
            break
        page.locator("dd.supersedes a").click()
        page.wait_for_load_state()
    assert texts[-1] == "Ana lives in Recife", texts
    assert "superseded" in page.locator("#fact-kv").inner_text()
    assert page.locator("dd.superseded-by a").count() == 1
    versions = page.locator("table.versions").inner_text()
    assert "added" in versions and "updated" in versions
    _goto(page, page.url.split("/facts/")[0] + "/entities")
    assert page.locator("svg.graph a").count() >= 3  # Ana, Recife, Porto Alegre, ...
    page.locator("svg.graph a", has_text="Porto Alegre").first.click()
    page.wait_for_url("**entity=place%3Aporto-alegre*")
    assert "Porto Alegre" in page.locator("main table").first.inner_text()
    page.go_back()
    shot(page, "graph")


def test_time_travel_back_before_the_move_and_diff(page: Any, open_server: str) -> None:
    _goto(page, f"{open_server}/ui/agents/{AGENT}/time")
    table = page.locator("table").first
    assert "Porto Alegre" in table.inner_text() and "Recife" not in table.inner_text()
    slider = page.locator("#at-slider")
    last = int(slider.get_attribute("max") or 0)
    assert last >= 4
    recife_at = None
    for index in range(last, -1, -1):  # move the slider back, one instant at a time
        with page.expect_navigation():
            slider.fill(str(index))
        held = page.locator("table").first.inner_text()
        if "Recife" in held:
            recife_at = page.locator("#at").input_value()
            assert "Porto Alegre" not in held  # before the move: Recife is current
            assert "Ana lives in Recife" in held
            break
    assert recife_at is not None, "no instant of the slider shows Recife"
    shot(page, "time-travel")
    page.fill("#t1", recife_at)
    page.locator("#t2").fill(page.locator("#t2").input_value())
    page.get_by_role("button", name="Diff").click()
    page.wait_for_load_state()
    changed = page.locator("table.diff tr.changed")
    assert changed.count() >= 1
    assert "Recife" in changed.first.inner_text() and "Porto Alegre" in changed.first.inner_text()
    shot(page, "diff")


def test_retrieve_explained_shows_the_cli_context(
    page: Any, open_server: str, ui_memory: Memory, ui_schema: tuple[str, dict[str, str]], pg_url: str
) -> None:
    _goto(page, f"{open_server}/ui/agents/{AGENT}/retrieve")
    page.fill("#q", "Where does Ana live?")
    page.get_by_role("button", name="Retrieve").click()
    page.wait_for_url("**/retrieve?q=*")
    context = page.locator("#context").inner_text()
    assert "Porto Alegre" in context
    assert page.locator("table.scores tbody tr").count() >= 1
    timings = page.locator("section", has_text="Per-stage timings").inner_text()
    assert "plan" in timings
    shot(page, "retrieve")
    schema, _env = ui_schema
    result = CliRunner().invoke(cli_app, ["retrieve", "Where does Ana live?", "--agent", AGENT], env={
        "ENGRAMDB_DATABASE_URL": pg_url, "ENGRAMDB_DB_SCHEMA": schema,
        "ENGRAMDB_EMBEDDING_MODEL": "hash-bow-384", "ENGRAMDB_LLM_API_KEY": "",
        "ENGRAMDB_LLM_BASE_URL": ""})
    assert result.exit_code == 0, result.output
    assert result.output.strip() == context.strip()


def test_delete_a_fact_shows_the_retraction_in_its_lineage(page: Any, open_server: str) -> None:
    _goto(page, f"{open_server}/ui/agents/{AGENT}?text=hiking")
    page.locator("tr", has_text="hiking").locator("a").last.click()
    page.wait_for_url("**/facts/*")
    page.get_by_role("link", name="Delete this fact…").click()
    page.wait_for_url("**/delete")
    shot(page, "confirm-delete")
    page.get_by_role("button", name="Yes, delete").click()
    page.wait_for_url(re.compile(r".*/facts/[^/]+$"))
    assert "retracted" in page.locator("#fact-kv").inner_text()
    versions = page.locator("table.versions").inner_text()
    assert "retracted" in versions and "key" not in versions.lower()
    assert "ui" in page.locator("table.versions tr.decision-delete").inner_text()


def test_erase_an_agent_leaves_nothing_of_it(page: Any, open_server: str, ui_memory: Memory) -> None:
    agent = "erase-me"
    ui_memory.write(agent, "I live in Lisbon and my sister Carla is a pilot.", speaker="Rui",
                    message_id="e1")
    ui_memory.wait_for_projections()
    fact_id = ui_memory.list_facts(agent).items[0].fact_id
    _goto(page, f"{open_server}/ui/agents/{agent}/erase")
    page.fill("#confirm_agent", "erase-you")
    page.get_by_role("button", name="Yes, erase").click()  # mistyped: refused, nothing done
    page.wait_for_load_state()
    assert "type the agent id" in page.inner_text("main")
    assert ui_memory.list_facts(agent).items
    _goto(page, f"{open_server}/ui/agents/{agent}/erase")
    page.fill("#confirm_agent", agent)
    page.get_by_role("button", name="Yes, erase").click()
    page.wait_for_url(f"**/ui/agents/{agent}")
    assert "Erased" in page.inner_text("main")
    for path in ("", "/conversation", f"/facts/{fact_id}", "/entities"):
        response = _goto(page, f"{open_server}/ui/agents/{agent}{path}")
        assert response.status == 410
        body = page.inner_text("body")
        assert "Lisbon" not in body and "Carla" not in body
    _goto(page, f"{open_server}/ui/agents?q=erase")
    assert agent not in page.inner_text("main")  # no row: nothing of it left
    _goto(page, f"{open_server}/ui/agents?q={agent}")  # only its exact id finds the marker
    assert "erased" in page.locator("tr.erased-row").inner_text()
    assert "Lisbon" not in page.inner_text("body")


HOSTILE = [
    "<script>window.__pwned = 1; alert('script')</script>",
    "<img src=x onerror=\"window.__pwned = 2; alert('img')\">",
    "[click me](javascript:alert('md')) <a href=\"javascript:window.__pwned=3\">link</a>",
    "bidi \u202eevil\u202c and \u2067isolate\u2069 <svg onload=alert('svg')>",
    "L" * 65_000,  # the longest line the API accepts (64 KiB of text)
]


def test_hostile_texts_render_inert(page: Any, open_server: str, ui_memory: Memory, pg_url: str,
                                    ui_schema: tuple[str, dict[str, str]]) -> None:
    agent = "hostile-<b>x</b>".replace("<", "").replace(">", "").replace("/", "")
    with httpx.Client(base_url=open_server) as client:
        for i, text in enumerate(HOSTILE):
            r = client.post("/v1/messages", json={
                "agent_id": agent, "message_id": f"h{i}", "speaker": "<i>eve</i>",
                "session_id": "<script>s</script>", "text": text,
                "metadata": {"note": "<script>alert('meta')</script>"}})
            assert r.status_code == 200, r.text
    ui_memory.wait_for_projections()
    for path in ("", "?status=all", "/conversation", "/entities", "/time", "/patterns",
                 "/retrieve?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E"):
        _goto(page, f"{open_server}/ui/agents/{agent}{path}")
        assert page.evaluate("window.__pwned") is None
        assert page.locator("main script, main img, main svg a[href^=javascript]").count() == 0
        assert page.locator("a[href^='javascript']").count() == 0
    _goto(page, f"{open_server}/ui/agents/{agent}/conversation")
    body = page.inner_text("main")
    assert "<script>window.__pwned = 1" in body  # shown as text, not run
    assert "<img src=x onerror=" in body
    assert "[U+202E]evil[U+202C]" in body  # the override is shown, not obeyed
    # the 64 KiB line wraps inside the page: no horizontal scroll of the whole document
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280 + 20, width
    shot(page, "hostile")
    # defence in depth: even markup that escaped escaping could not run (CSP, no inline code)
    page.evaluate("document.body.insertAdjacentHTML('beforeend', "
                  "'<img src=x onerror=\"window.__pwned = 9\">')")
    page.wait_for_timeout(300)
    assert page.evaluate("window.__pwned") is None
    refused = [p for p in page.problems if "Content Security Policy" in p]
    assert refused, page.problems  # the browser refused the inline handler, and said so
    page.problems[:] = [p for p in page.problems if p not in refused]


def test_a_5000_fact_agent_pages(page: Any, open_server: str, ui_memory: Memory) -> None:
    from tests.support.ui_seed import seed_agent

    agent = "big-5000"
    cell = ui_memory.cell(agent)
    with cell.pool.connection() as conn, conn.transaction():
        seed_agent(conn, agent, 5000, text=None)
    response = _goto(page, f"{open_server}/ui/agents/{agent}")
    assert response.status == 200
    assert page.locator("main table tbody tr").count() == 50
    page.get_by_role("link", name="Next page →").click()
    page.wait_for_load_state()
    assert page.locator("main table tbody tr").count() == 50
    for path in ("/entities", "/conversation", "/time", "/facts/f9"):
        assert _goto(page, f"{open_server}/ui/agents/{agent}{path}").status == 200
    assert "supersedes" in page.inner_text("main").lower()
    # a source turn deep in the conversation: its link opens the page that holds it
    _goto(page, f"{open_server}/ui/agents/{agent}/facts/f4998")
    page.locator("a.source-link").click()
    page.wait_for_load_state()
    assert page.locator("li#m-m2499").count() == 1
    # a 100 kB line (possible only in the read model: the API caps a turn at 64 KiB)
    with cell.pool.connection() as conn:
        conn.execute("UPDATE mem_facts SET fact_text = %s WHERE agent_id = %s AND fact_id = 'f5'",
                     ("W" * 100_000, agent))
    for path in ("?text=WWWW", "/facts/f5"):
        assert _goto(page, f"{open_server}/ui/agents/{agent}{path}").status == 200
        assert page.evaluate("document.documentElement.scrollWidth") <= 1300
        assert 250 < len(page.inner_text("main")) < 20_000  # clipped, not 100 kB of W


def test_read_key_cannot_act_and_no_key_is_a_login_page(page: Any, keyed_server: str) -> None:
    response = _goto(page, f"{keyed_server}/ui/agents/{AGENT}")
    assert response.status == 401
    assert page.locator("#key").count() == 1 and "Ana" not in page.inner_text("main")
    shot(page, "login")
    page.fill("#key", READ_KEY)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/ui/agents")
    assert READ_KEY not in page.url
    cookies = {c["name"]: c for c in page.context.cookies()}
    session = cookies["engramdb_ui_session"]
    assert session["httpOnly"] and session["sameSite"] == "Strict" and session["expires"] > 0
    assert page.get_by_role("link", name=AGENT, exact=True).count() == 1
    _goto(page, f"{keyed_server}/ui/agents/{AGENT}?text=Vertix")
    page.locator("tr", has_text="Vertix").locator("a").last.click()
    page.wait_for_url("**/facts/*")
    assert page.get_by_role("link", name="Delete this fact…").count() == 0
    fact_url = page.url
    assert _goto(page, fact_url + "/delete").status == 403
    # a forged POST with the page's own CSRF token is still refused: scope, not only CSRF
    _goto(page, fact_url)
    token = page.locator("input[name=csrf]").first.input_value()
    status = page.evaluate(
        "async ([u, t]) => (await fetch(u, {method: 'POST', headers: {'Content-Type': "
        "'application/x-www-form-urlencoded'}, body: 'csrf=' + t})).status",
        [fact_url + "/delete", token])
    assert status == 403
    assert _goto(page, f"{keyed_server}/ui/ops").status == 403
    assert "active" in page.context.request.get(fact_url).text()  # still there
    # an admin key may
    page.get_by_role("button", name="Log out").click() if page.get_by_role(
        "button", name="Log out").count() else None
    _goto(page, f"{keyed_server}/ui/login")
    page.fill("#key", ADMIN_KEY)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/ui/agents")
    assert _goto(page, f"{keyed_server}/ui/ops").status == 200
    shot(page, "operations")


def test_keyboard_and_labels(page: Any, open_server: str) -> None:
    """Every form control has a label, and the main paths work from the keyboard alone."""
    for path in ("/ui/agents", f"/ui/agents/{AGENT}", f"/ui/agents/{AGENT}/time",
                 f"/ui/agents/{AGENT}/retrieve", f"/ui/agents/{AGENT}/entities",
                 f"/ui/agents/{AGENT}/erase"):
        _goto(page, open_server + path)
        unlabelled = page.evaluate(
            "() => [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]"
            ".filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))"
            ".map(e => e.id || e.name)")
        assert unlabelled == [], (path, unlabelled)
    _goto(page, f"{open_server}/ui/agents")
    for _ in range(30):  # Tab to the agent's link, Enter opens it
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent") == AGENT:
            break
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/ui/agents/{AGENT}")
    _goto(page, f"{open_server}/ui/agents/{AGENT}/time")
    page.focus("#at-slider")
    before = page.locator("#at").input_value()
    with page.expect_navigation():
        page.keyboard.press("ArrowLeft")  # the slider moves and shows that instant
    assert page.locator("#at").input_value() < before


def test_patterns_profiles_and_job_runs_after_the_jobs(page: Any, open_server: str,
                                                      ui_memory: Memory) -> None:
    """Last in this module: it runs the sleep-time jobs on the demo agent."""
    from engramdb.services.jobs import JobContext
    from engramdb.services.jobs.runner import run_pass

    runs = run_pass(JobContext(ui_memory), agents=[AGENT])
    assert any(r.status == "ok" for r in runs), runs
    ui_memory.wait_for_projections()
    _goto(page, f"{open_server}/ui/agents/{AGENT}/patterns")
    profiles = page.locator("table", has_text="Entity profiles").inner_text()
    assert "Ana" in profiles and "template-v1" in profiles
    patterns = page.locator("table", has_text="Observed patterns")
    assert patterns.locator("tbody tr a").count() >= 1  # a pattern, linked to its facts
    shot(page, "patterns")
    _goto(page, f"{open_server}/ui/ops")
    jobs = page.locator("table", has_text="Latest run of each job").inner_text()
    assert "profiles" in jobs and AGENT in jobs
