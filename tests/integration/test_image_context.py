"""The image's build context builds the whole package (issue 27, ADR-0050).

``tests/unit/test_docker.py`` checks the context's file list and size; this builds a wheel
from that very context with ``pip wheel`` (what the Dockerfile's ``pip install .`` does first),
which takes ~20 s with build isolation, so it is not a unit test.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from docker.utils.build import tar

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = [
    line.strip()
    for line in (ROOT / ".dockerignore").read_text().splitlines()
    if line.strip() and not line.lstrip().startswith("#")
]


@pytest.fixture(scope="module")
def context() -> tarfile.TarFile:
    stream = tar(str(ROOT), exclude=PATTERNS, dockerfile=("Dockerfile", None), gzip=False)
    return tarfile.open(fileobj=io.BytesIO(stream.read()))


def test_the_context_builds_the_whole_package(context: tarfile.TarFile, tmp_path: Path) -> None:
    """``pip install .`` inside the context (as the Dockerfile's RUN does) builds a wheel
    with every module and prompt the working tree's package has."""
    import subprocess
    import sys
    import zipfile

    context.extractall(tmp_path / "ctx", filter="fully_trusted")  # our own tree; keeps the links
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(tmp_path / "out"), str(tmp_path / "ctx")],
        check=True, capture_output=True, timeout=300,
    )
    wheel = next((tmp_path / "out").glob("engramdb-*.whl"))
    packaged = {n for n in zipfile.ZipFile(wheel).namelist() if n.startswith("engramdb/")}
    expected = {
        f"engramdb/{p.relative_to(ROOT / top).as_posix()}" if top == "engramdb"
        else f"engramdb/{top}/{p.relative_to(ROOT / top).as_posix()}"
        for top in ("engramdb", "domain", "projections", "services", "infra")
        for p in (ROOT / top).rglob("*.py")
        if "__pycache__" not in p.parts and not p.is_symlink() and (top != "engramdb" or p.parent == ROOT / top)
    }
    assert expected <= packaged, sorted(expected - packaged)[:5]
    assert any(n.startswith("engramdb/infra/prompts/") for n in packaged)
