"""The inspector works from the wheel alone: its templates and static files are in it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from engramdb.services.entrypoints.http.ui.render import HERE

REPO = Path(__file__).resolve().parents[3]


def test_the_wheel_ships_every_template_and_static_file(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
         "-w", str(tmp_path), str(REPO)],
        check=True, capture_output=True, timeout=600,
    )
    (wheel,) = tmp_path.glob("engramdb-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    base = "engramdb/services/entrypoints/http/ui"
    shipped = {f"{base}/{p.parent.name}/{p.name}" for d in ("templates", "static")
               for p in (HERE / d).iterdir()}
    assert shipped and shipped <= names, sorted(shipped - names)
