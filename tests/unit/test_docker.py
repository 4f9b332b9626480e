"""The image's build context and Dockerfile, checked without Docker (issue 27, ADR-0050).

Docker cannot run on the test machines, so the build context is made exactly as ``docker
build`` makes it: docker-py's ``docker.utils.build.tar`` with its own ``.dockerignore``
matcher (the one the Docker SDK for Python uses to send a context to the daemon). The file
list and size of that tarball are what the image would be built from. A working tree with a
445 MB ``.venv`` and an ``.env`` once went into the image whole.
"""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest
from docker.utils.build import exclude_paths, tar

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = [
    line.strip()
    for line in (ROOT / ".dockerignore").read_text().splitlines()
    if line.strip() and not line.lstrip().startswith("#")
]
MAX_CONTEXT_BYTES = 5 * 1024 * 1024


@pytest.fixture(scope="module")
def context() -> tarfile.TarFile:
    """The build context of this checkout, as docker would send it."""
    stream = tar(str(ROOT), exclude=PATTERNS, dockerfile=("Dockerfile", None), gzip=False)
    data = stream.read()
    stream.close()
    assert len(data) < MAX_CONTEXT_BYTES, f"build context is {len(data) / 1e6:.1f} MB"
    return tarfile.open(fileobj=io.BytesIO(data))


def test_context_is_small_and_holds_what_pip_install_needs(context: tarfile.TarFile) -> None:
    names = set(context.getnames())
    for needed in ("pyproject.toml", "README.md", "Dockerfile", "engramdb/__init__.py",
                   "services/entrypoints/serve/probe.py", "infra/settings.py", "domain/agent_id.py"):
        assert needed in names, needed
    assert context.getmember("engramdb/services").issym()  # the package's links (ADR-0007)
    for name in names:
        top = name.split("/")[0]
        assert top not in {".venv", "venv", ".git", "tests", "bench", "docs", ".engramdb"}, name
        assert "__pycache__" not in name and not name.endswith(".pyc"), name


def test_secrets_and_environments_stay_out(tmp_path: Path) -> None:
    """The same rules on a tree that has what a user's clone may have."""
    shutil.copy(ROOT / ".dockerignore", tmp_path / ".dockerignore")
    for rel in (".env", ".env.local", "infra/.env", ".venv/bin/python", "data/pgdata/PG_VERSION",
                "api-keys.json", "pyproject.toml", "infra/settings.py", "infra/__pycache__/x.pyc"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    kept = {p for p in exclude_paths(str(tmp_path), PATTERNS) if (tmp_path / p).is_file()}
    assert kept == {".dockerignore", "pyproject.toml", "infra/settings.py"}  # docker always sends it


def test_dockerfile_runs_as_a_user_with_a_readiness_check() -> None:
    lines = [line.strip() for line in (ROOT / "Dockerfile").read_text().splitlines()]
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users == ["engramdb"]
    assert any("useradd --system" in line for line in lines)
    text = "\n".join(lines)
    assert 'CMD ["python", "-m", "engramdb.services.entrypoints.serve.probe"]' in text
    assert "HEALTHCHECK" in text
    assert "ENGRAMDB_HTTP_HOST=0.0.0.0" in text  # reachable through -p; keys then required
    assert 'CMD ["engramdb", "serve", "--role", "all"]' in text

