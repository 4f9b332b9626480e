"""``engramdb demo`` beside a running ``engramdb serve`` on the same data (issue 13).

With one ingest partition the serve holds it, so its consumer decides every turn the demo
publishes. The demo used to wait for its own consumer's results only: it sat out its 120 s
deadline and then showed no decisions. Now it waits until the turns are in the conversation
log, whoever processed them, and shows the decisions from the log.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engramdb.services.entrypoints.cli.main import app
from tests.support.scale_support import serve_env, start_serve, stop, wait_for


def _section(output: str, title: str) -> list[str]:
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"=== {title}"))
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("=== ")), len(lines))
    return [line for line in lines[start + 1:end] if line.strip()]


def test_the_demo_shows_the_decisions_a_running_serve_made(
    pg_url: str, nats_url: str, fresh_schema, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    schema, _env = fresh_schema("demo_serve")
    prefix = f"d{uuid.uuid4().hex[:8]}"
    env = serve_env(pg_url, nats_url, schema, prefix, ENGRAMDB_INGEST_PARTITIONS="1")
    log = tmp_path / "serve.log"
    proc, _port = start_serve(env, str(log))
    try:
        wait_for(lambda: log.exists() and "ingest partition 0: consuming" in log.read_text(errors="replace"),
                 60, "the serve holding the only partition")
        for key in ("ENGRAMDB_DATABASE_URL", "ENGRAMDB_NATS_URL", "ENGRAMDB_DB_SCHEMA",
                    "ENGRAMDB_EMBEDDING_MODEL", "ENGRAMDB_SUBJECT_PREFIX", "ENGRAMDB_INGEST_PARTITIONS"):
            monkeypatch.setenv(key, env[key])
        for key in ("ENGRAMDB_LLM_API_KEY", "ENGRAMDB_LLM_BASE_URL"):
            monkeypatch.delenv(key, raising=False)
        result = CliRunner().invoke(app, ["demo"])
    finally:
        stop([proc])
    assert result.exit_code == 0, result.output
    decisions = _section(result.output, "decisions, per message")
    assert [line.split()[0] for line in decisions] == [f"demo-{i}" for i in range(1, 7)]
    assert all("decided by another process's consumer" in line for line in decisions), decisions
    assert any("UPDATE" in line for line in decisions)  # the move to Porto Alegre, from the log
    assert all("nothing to remember" not in line for line in decisions[:5]), decisions
    assert "Known facts:\n- " in result.output
    assert "IntegrityError" not in log.read_text(errors="replace")
