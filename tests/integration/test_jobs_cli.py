"""``engramdb jobs run`` when no process runs the projections (issue 12): the CLI projects
the job events itself (ADR-0030) instead of waiting 30 s per job for a projector that is not
there. Real PostgreSQL + NATS from the fixtures; hashing embedder; no LLM."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.memory.facade import Memory


def test_jobs_run_projects_its_own_events_when_no_projector_runs(
    monkeypatch: pytest.MonkeyPatch, pg_url: str, nats_url: str, fresh_schema: Any
) -> None:
    from typer.testing import CliRunner

    from engramdb.services.entrypoints.cli.main import app

    schema, env = fresh_schema("jobsnoproj")
    for key, value in {"DATABASE_URL": pg_url, "NATS_URL": nats_url, "DB_SCHEMA": schema,
                       "EMBEDDING_MODEL": "hash-bow-384"}.items():
        monkeypatch.setenv(f"ENGRAMDB_{key}", value)
    agent = f"np-{uuid.uuid4().hex[:6]}"
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as memory:
        for text in ("I live in Porto", "Actually, I live in Lisbon", "I like green tea",
                     "I like green tea", "I like green tea"):
            memory.write(agent, text, speaker="Ana")
        memory.wait_for_projections()
    # the memory above is closed: no process projects this schema any more
    started = time.monotonic()
    result = CliRunner().invoke(app, ["jobs", "run", "--agent", agent])
    elapsed = time.monotonic() - started
    assert result.exit_code == 0, result.output
    assert "0 failed" in result.output
    # before: every job after the first that emitted waited 30 s for projections, then failed
    assert elapsed < 25.0, f"jobs run took {elapsed:.1f}s"
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True,
                     start_projectors=False) as memory, memory.pool.connection() as conn:
        usage = conn.execute("SELECT count(*) FROM mem_fact_usage WHERE agent_id = %s",
                             (agent,)).fetchone()[0]
        patterns = conn.execute("SELECT count(*) FROM mem_patterns WHERE agent_id = %s",
                                (agent,)).fetchone()[0]
    assert usage > 0 and patterns > 0  # the CLI's own projectors applied the job events
