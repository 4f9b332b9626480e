"""The README's promise, walked case by case: a user's mistake is ONE ``error:`` line on
stderr and exit code 2 — never a traceback (issue 27). Only failures that happen before any
server is reached live here (a closed port, a bad argument, an unreachable data dir); the
ones needing a database are in tests/integration/test_cli_ux.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from engramdb.services.entrypoints.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


CASES = {
    "unknown role": (["serve", "--role", "bogus"], "unknown role"),
    "unknown transport": (["mcp", "--transport", "carrier-pigeon"], "unknown transport"),
    "bad pin": (["mcp", "--agent", "a*b*"], "prefix ending in '*'"),
    "bad agent id": (["retrieve", "--agent", "not valid!", "q"], "agent_id"),
    "bad time": (["facts", "--agent", "A", "--as-of", "yesterday"], "ISO-8601"),
    "unknown projection": (["rebuild", "--projection", "nope"], "unknown read model"),
    "closed database": (["list-agents"], "cannot reach the database"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_documented_failure_is_one_error_line_and_exit_2(case: str, monkeypatch, tmp_path) -> None:
    args, says = CASES[case]
    monkeypatch.setenv("ENGRAMDB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("ENGRAMDB_DATABASE_URL", f"postgresql://postgres@127.0.0.1:{_closed_port()}/x")
    monkeypatch.setenv("ENGRAMDB_NATS_URL", f"nats://127.0.0.1:{_closed_port()}")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, (case, result.output)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], (case, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("command", ["serve", "status", "list-agents"])
def test_a_per_operation_llm_setting_without_endpoint_is_one_line(command: str, monkeypatch,
                                                                   tmp_path) -> None:
    """ADR-0052: a per-operation model for an operation with no endpoint cannot take effect;
    every command refuses it at start-up, naming the variable (and never a key)."""
    for name in list(os.environ):
        if name.startswith("ENGRAMDB_LLM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ENGRAMDB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("ENGRAMDB_LLM_RERANK_MODEL", "big")
    monkeypatch.setenv("ENGRAMDB_LLM_PROFILES_API_KEY", "sk-must-not-show")
    monkeypatch.setenv("ENGRAMDB_LLM_PROFILES_BASE_URL", "localhost:9/v1")
    result = CliRunner().invoke(app, [command])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "ENGRAMDB_LLM_" in lines[0] and "sk-must-not-show" not in result.output


@pytest.mark.skipif(os.geteuid() != 0, reason="the embedded server's own user exists only as root")
def test_unreachable_embedded_data_dir_is_one_line(tmp_path: Path) -> None:
    """As root the embedded PostgreSQL runs as its own user; a data dir under a 0700 parent
    is unreachable to it — a 46-line traceback before, one line now."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAMDB_")}
    env.update(ENGRAMDB_DATA_DIR=str(private / "data"), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "engramdb.services.entrypoints.cli.main", "list-agents"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: running as root") and "ENGRAMDB_DATA_DIR" in lines[0]
