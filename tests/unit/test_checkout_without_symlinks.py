"""A checkout made without symlink support fails at import with one line that says the fix."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_import_names_the_missing_symlinks_and_the_fix(tmp_path: Path) -> None:
    package = tmp_path / "engramdb"
    package.mkdir()
    shutil.copy(REPO / "engramdb" / "__init__.py", package / "__init__.py")
    for layer in ("domain", "projections", "services", "infra"):
        (package / layer).write_text(f"../{layer}")  # what git writes for a link it cannot make
    proc = subprocess.run(
        [sys.executable, "-c", "import engramdb"], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: engramdb/domain is a plain file, not a link")
    assert "git config core.symlinks true" in last


def test_the_real_checkout_imports() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import engramdb; print(engramdb.Memory.__name__)"],
        cwd=REPO, capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Memory"
