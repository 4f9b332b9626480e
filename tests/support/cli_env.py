"""Point the CLI commands a test runs in-process (Typer's runner) at the test PostgreSQL.

Why one helper: every CLI test set the same variables — the database and schema, the offline
hash embedder (no model download, fast), and no LLM — and a copy that forgot one picked up the
machine's settings instead."""

from __future__ import annotations

import pytest


def point_cli_at(monkeypatch: pytest.MonkeyPatch, pg_url: str, schema: str) -> None:
    monkeypatch.setenv("ENGRAMDB_DATABASE_URL", pg_url)
    monkeypatch.setenv("ENGRAMDB_DB_SCHEMA", schema)
    monkeypatch.setenv("ENGRAMDB_EMBEDDING_MODEL", "hash-bow-384")
    monkeypatch.delenv("ENGRAMDB_LLM_API_KEY", raising=False)
    monkeypatch.delenv("ENGRAMDB_LLM_BASE_URL", raising=False)
