"""Every code block of README.md runs as written (issue 27, ADR-0050).

A newcomer types what the README shows; a snippet that ends in ``NameError`` or a command
line in ``[--option]`` notation is a broken promise. So each fenced block is run as it is:
``bash`` blocks with ``bash -e`` and ``python`` blocks with the venv's interpreter, on the
embedded default (the session's embedded PostgreSQL and NATS, found through
``ENGRAMDB_DATA_DIR`` exactly as a user's ``engramdb`` finds its own; a fresh schema keeps
agent ``A`` new), with the venv's ``bin`` first on ``PATH`` as after ``source
.venv/bin/activate``. ``json`` blocks must parse and name a real ``engramdb`` command. A block
that must not run (the install, the test suite itself, the benchmarks) says so with
``<!-- readme-test: skip (why) -->`` right above it; the reason is required.

The offline embedder is the hash one (``ENGRAMDB_EMBEDDING_MODEL=hash-bow-384``): the blocks'
outputs are checked for what they say, not for ranking quality, and loading the default model
in each subprocess would cost minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SKIP = re.compile(r"<!--\s*readme-test:\s*skip\s*\((?P<why>[^)]+)\)\s*-->\s*$")
FENCE = re.compile(r"^```(\w*)\s*$")


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int
    skip: str | None


def readme_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        above = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = SKIP.search(above)
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        blocks.append(Block(opening.group(1), "\n".join(lines[i + 1:end]) + "\n", i + 1,
                            marker.group("why") if marker else None))
        i = end + 1
    return blocks


BLOCKS = readme_blocks((ROOT / "README.md").read_text())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def readme_env(embedded_data_dir: Path, pg_url: str, nats_url: str, tmp_path_factory) -> dict[str, str]:
    """A user's shell after ``source .venv/bin/activate``, on the embedded default."""
    import uuid

    import psycopg
    from psycopg import sql

    schema = f"readme_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAMDB_")}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        ENGRAMDB_DATA_DIR=str(embedded_data_dir), ENGRAMDB_DB_SCHEMA=schema,
        ENGRAMDB_EMBEDDING_MODEL="hash-bow-384", ENGRAMDB_HTTP_PORT=str(_free_port()),
        OMP_NUM_THREADS="1", NO_COLOR="1",
    )
    yield env
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_the_readme_has_blocks_to_run_and_every_skip_has_a_reason() -> None:
    langs = {b.lang for b in BLOCKS}
    assert {"bash", "python", "json"} <= langs, langs
    assert all(b.lang for b in BLOCKS), "a fence without a language cannot be run"
    assert sum(b.skip is None and b.lang in ("bash", "python") for b in BLOCKS) >= 4
    for block in BLOCKS:
        assert block.skip is None or block.skip.strip(), block.line


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.skip is None], ids=lambda b: f"{b.lang}@{b.line}")
def test_readme_block_runs_as_written(block: Block, readme_env: dict[str, str], tmp_path: Path) -> None:
    if block.lang == "json":
        config = json.loads(block.code)
        for server in config["mcpServers"].values():
            assert Path(server["command"]).name == "engramdb" and server["args"][0] == "mcp"
            help_run = subprocess.run(["engramdb", *server["args"], "--help"], env=readme_env,
                                      capture_output=True, text=True, timeout=60)
            assert help_run.returncode == 0, help_run.stderr  # every option it names exists
        return
    command = ["bash", "-e", "-o", "pipefail", "-c", block.code] if block.lang == "bash" else [
        sys.executable, "-c", block.code]
    assert block.lang in ("bash", "python"), f"README.md:{block.line}: unknown block {block.lang!r}"
    done = subprocess.run(command, env=readme_env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    where = f"README.md:{block.line} ({block.lang}) rc {done.returncode}"
    assert done.returncode == 0, f"{where}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, where
    if "Where does Ana live?" in block.code:
        assert "Porto Alegre" in done.stdout, done.stdout  # the answer the README promises
