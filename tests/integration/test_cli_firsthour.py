"""CLI findings of a new user's first hour (issue 27): an agent that does not exist is an
``error:`` line and exit 2 (not "(no relevant memory)" and rc 0), ``keys list`` with no keys
says so, ``history`` / ``facts`` print text by default and JSON with ``--json``."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from engramdb.services.entrypoints.cli.main import app
from engramdb.services.memory.facade import Memory


def _setup(monkeypatch, pg_url, nats_url, fresh_schema, tmp_path) -> None:
    schema, _env = fresh_schema("clifh")
    for key, value in {"DATABASE_URL": pg_url, "NATS_URL": nats_url, "DB_SCHEMA": schema,
                       "EMBEDDING_MODEL": "hash-bow-384", "DATA_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(f"ENGRAMDB_{key}", value)
    for key in ("ENGRAMDB_LLM_API_KEY", "ENGRAMDB_LLM_BASE_URL", "ENGRAMDB_API_KEYS"):
        monkeypatch.delenv(key, raising=False)


def test_first_hour_cli(monkeypatch, pg_url, nats_url, fresh_schema, tmp_path, agent_id) -> None:
    _setup(monkeypatch, pg_url, nats_url, fresh_schema, tmp_path)
    runner = CliRunner()
    missing = runner.invoke(app, ["retrieve", "--agent", "nobody-here", "Where does Ana live?"])
    assert missing.exit_code == 2
    assert missing.output.strip() == (
        "error: agent 'nobody-here' has no memory (nothing was ever written for it; "
        "`engramdb list-agents` names those that have)"
    )

    with Memory.open(quiet=True) as memory:
        written = memory.write(agent_id, "I work at Globex.", speaker="Rita")
        memory.wait_for_projections(written.position)
    fact_id = next(d.fact_id for d in written.decisions if d.kind == "ADD")
    unrelated = runner.invoke(app, ["retrieve", "--agent", agent_id, "zebra"])
    assert unrelated.exit_code == 0  # an agent with memory and nothing relevant is no error

    text = runner.invoke(app, ["history", "--agent", agent_id])
    assert text.exit_code == 0 and "{" not in text.output
    assert any(" ADD " in line and fact_id in line for line in text.output.splitlines())
    as_json = runner.invoke(app, ["history", "--agent", agent_id, "--json"])
    assert "ADD" in [e["decision"] for e in json.loads(as_json.output)]
    facts = runner.invoke(app, ["facts", "--agent", agent_id])
    assert facts.output.strip() == f"{fact_id}  active     Rita works at Globex."

    keys = runner.invoke(app, ["keys", "list"])
    assert keys.exit_code == 0
    assert keys.output.startswith(f"no API keys (looked in {tmp_path / 'api-keys.json'})")


def test_missing_pg_trgm_is_noted_once_at_debug(pg_url, caplog) -> None:
    """The embedded build has no pg_trgm: expected, so no INFO line on every serve."""
    import logging

    from engramdb.infra import database

    database._NOTED_MISSING.clear()
    with caplog.at_level(logging.DEBUG, logger=database.log.name):
        first = database.ensure_extensions(pg_url)
        database.ensure_extensions(pg_url)
    notes = [r for r in caplog.records if "pg_trgm" in r.getMessage()]
    if "pg_trgm" in first:
        assert notes == []  # a server with contrib: nothing to say
    else:
        assert [r.levelno for r in notes] == [logging.DEBUG]
