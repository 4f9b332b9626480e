"""Memory from other tools on a REAL PostgreSQL (ADR-0049): a Mem0 ``get_all`` dump becomes
client facts (Mem0 ids kept, a second import changes nothing), an OpenAI-style transcript
goes through the write pipeline (a second import is all duplicates), malformed items are
refused naming the line or item with nothing written; and the CLI's ``export`` / ``import``
round trip between two stores, an erased agent exporting nothing.

The Mem0 dump is written by hand in the shape Mem0's ``Memory.get_all`` returns (v1.1:
``{"results": [{"id", "memory", "hash", "metadata", "created_at", "updated_at", "user_id"}]}``);
generating one with the ``mem0ai`` package needs an LLM and a vector store, so it is not done
here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.cli.main import app as cli_app
from engramdb.services.management.import_foreign import ForeignImportRefused
from engramdb.services.memory.facade import Memory

MEM0 = {"results": [
    {"id": "6f1e0d6c-1", "memory": "Likes sushi", "hash": "a1", "metadata": {"src": "chat"},
     "created_at": "2025-07-20T01:30:36.275141-07:00", "updated_at": None, "user_id": "alice"},
    {"id": "6f1e0d6c-2", "memory": "Lives in Porto", "hash": "b2", "metadata": None,
     "created_at": "2025-08-01T10:00:00-07:00", "updated_at": None, "user_id": "alice"},
]}
TRANSCRIPT = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "name": "Ana", "content": "I live in Recife.", "timestamp": "2025-03-01T10:00:00Z"},
    {"role": "assistant", "content": "Nice city!", "timestamp": "2025-03-01T10:00:05Z"},
    {"role": "user", "name": "Ana", "content": [{"type": "text", "text": "I work at Vertix."}],
     "timestamp": "2025-03-01T10:01:00Z"},
]


@pytest.fixture
def memory(fresh_schema: Any) -> Iterator[Memory]:
    _schema, env = fresh_schema("foreign")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield mem


def test_mem0_dump(memory: Memory, agent_id: str) -> None:
    [batch] = memory.import_mem0(agent_id, json.dumps(MEM0))
    added = [d for d in batch.decisions if d.kind == "ADD"]
    assert [d.text for d in added] == ["Likes sushi", "Lives in Porto"]
    [entry] = [h for h in memory.history(agent_id, added[0].fact_id) if h.decision == "ADD"]
    assert entry.decided_by["via"] == "import-mem0"
    assert entry.decided_by["metadata"]["mem0_id"] == "6f1e0d6c-1"
    assert entry.valid_at is not None and entry.valid_at.year == 2025
    head = memory.app.recorder.max_notification_id()
    assert memory.import_mem0(agent_id, json.dumps(MEM0)) == []  # every Mem0 id already there
    assert memory.app.recorder.max_notification_id() == head
    bad = {"results": [MEM0["results"][0], {"id": "x", "memory": ""}]}
    with pytest.raises(ForeignImportRefused) as refused:
        memory.import_mem0(agent_id, json.dumps(bad))
    assert refused.value.where == "item 1" and "text" in refused.value.reason


def test_transcript(memory: Memory, agent_id: str) -> None:
    text = json.dumps(TRANSCRIPT)
    written = memory.import_transcript(agent_id, text, session_id="s1")
    assert len(written) == 3 and not any(r.duplicate for r in written)
    assert any(d.kind == "ADD" for d in written[0].decisions)  # extracted by the pipeline
    memory.wait_for_projections()
    turns = memory.list_messages(agent_id).items
    assert [(t.speaker, t.text) for t in turns] == [
        ("Ana", "I live in Recife."), ("assistant", "Nice city!"), ("Ana", "I work at Vertix.")]
    assert all(r.duplicate for r in memory.import_transcript(agent_id, text, session_id="s1"))
    lines = "\n".join(json.dumps(m) for m in TRANSCRIPT[:2]) + '\n{"role": "user", "content": ""}\n'
    with pytest.raises(ForeignImportRefused) as refused:
        memory.import_transcript(agent_id, lines)
    assert refused.value.where == "line 3"
    with pytest.raises(ForeignImportRefused, match="line 2"):
        memory.import_transcript(agent_id, '{"role": "user", "content": "hi"}\n{"role": "x"}\n')


def _cli_env(monkeypatch: pytest.MonkeyPatch, pg_url: str, schema: str) -> None:
    monkeypatch.setenv("ENGRAMDB_DATABASE_URL", pg_url)
    monkeypatch.setenv("ENGRAMDB_DB_SCHEMA", schema)
    monkeypatch.setenv("ENGRAMDB_EMBEDDING_MODEL", "hash-bow-384")
    monkeypatch.delenv("ENGRAMDB_LLM_API_KEY", raising=False)
    monkeypatch.delenv("ENGRAMDB_LLM_BASE_URL", raising=False)


def test_cli_export_import(monkeypatch: pytest.MonkeyPatch, pg_url: str, fresh_schema: Any,
                           agent_id: str, tmp_path: Path) -> None:
    runner = CliRunner()
    source, _ = fresh_schema("clisrc")
    target, _ = fresh_schema("clidst")
    _cli_env(monkeypatch, pg_url, source)
    transcript = tmp_path / "chat.json"
    transcript.write_text(json.dumps(TRANSCRIPT))
    done = runner.invoke(cli_app, ["import", str(transcript), "--from", "transcript", "--agent", agent_id])
    assert done.exit_code == 0 and "3 turns written" in done.stdout, done.output
    out = tmp_path / "a.jsonl"
    exported = runner.invoke(cli_app, ["export", "--agent", agent_id, "--out", str(out)])
    assert exported.exit_code == 0, exported.output
    assert json.loads(out.read_text().splitlines()[0])["agent_id"] == agent_id
    facts = json.loads(runner.invoke(cli_app, ["list-facts", "--agent", agent_id, "--json"]).stdout)

    _cli_env(monkeypatch, pg_url, target)
    first = runner.invoke(cli_app, ["import", str(out)])
    assert first.exit_code == 0 and "already present" in first.stdout, first.output
    again = runner.invoke(cli_app, ["import", str(out), "--json"])
    assert again.exit_code == 0 and json.loads(again.stdout)["inserted"] == 0
    assert json.loads(runner.invoke(cli_app, ["list-facts", "--agent", agent_id, "--json"]).stdout) == facts

    broken = tmp_path / "broken.jsonl"
    lines = out.read_text().splitlines()
    broken.write_text("\n".join(lines[:2] + ["{not json"] + lines[3:]) + "\n")
    refused = runner.invoke(cli_app, ["import", str(broken)])
    assert refused.exit_code == 2 and "line 3" in refused.stderr and "Traceback" not in refused.output
    missing = runner.invoke(cli_app, ["import", str(tmp_path / "nope.jsonl")])
    assert missing.exit_code == 2 and "cannot read" in missing.stderr

    erased = runner.invoke(cli_app, ["erase", "--agent", agent_id, "--yes"])
    assert erased.exit_code == 0, erased.output
    gone = tmp_path / "gone.jsonl"
    nothing = runner.invoke(cli_app, ["export", "--agent", agent_id, "--out", str(gone)])
    assert nothing.exit_code == 2 and "erased" in nothing.stderr and not gone.exists()
