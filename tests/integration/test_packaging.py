"""The distribution is one import package, ``engramdb``, with a pinned public API.

Why: five generic top-level packages (``domain``, ``services``, …) collide with any user's
own; and the repository's root folders are importable from a checkout by accident (the
working directory is on ``sys.path``), so a forgotten ``from services…`` import would pass
every other test and only break an installed wheel. These tests close both doors.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import engramdb

REPO = Path(__file__).resolve().parents[2]
LAYERS = ("domain", "projections", "services", "infra")

PUBLIC_API = {
    "AsyncMemory",
    "ConversationMessage",
    "DecisionRejected",
    "EmbeddedServerError",
    "EmbeddingModelMismatch",
    "EmbeddingProvider",
    "Extractor",
    "InvalidMessage",
    "LLMProvider",
    "Memory",
    "ProviderBadResponse",
    "ProviderError",
    "ProviderRateLimited",
    "ProviderTimeout",
    "ProviderUnavailable",
    "RerankFailed",
    "RetrieveConfig",
    "RetrieveResult",
    "Settings",
    "UnknownConfigKey",
    "WriteResult",
}


def test_public_api_is_pinned_and_every_name_resolves() -> None:
    assert set(engramdb.__all__) == PUBLIC_API
    for name in engramdb.__all__:
        value = getattr(engramdb, name)
        assert value.__name__ == name
        assert value.__module__.startswith("engramdb.")


def test_unknown_public_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Memroy'"):
        engramdb.Memroy  # noqa: B018


def _python_files() -> list[Path]:
    roots = [REPO / layer for layer in LAYERS] + [REPO / "tests", REPO / "bench"]
    return sorted(path for root in roots for path in root.rglob("*.py"))


def test_no_module_imports_a_layer_as_a_top_level_package() -> None:
    offenders = []
    for path in _python_files():
        tree = ast.parse(path.read_text("utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                if name.split(".")[0] in LAYERS:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} {name}")
    assert offenders == [], "import these as engramdb.<layer>…: " + ", ".join(offenders)


def test_installed_layers_do_not_import_bench() -> None:
    offenders = [
        str(path.relative_to(REPO))
        for layer in LAYERS
        for path in (REPO / layer).rglob("*.py")
        if "import bench" in path.read_text("utf-8") or "from bench" in path.read_text("utf-8")
    ]
    assert offenders == []


def _site_packages(env_dir: Path) -> Path:
    (path,) = env_dir.glob("lib/python3*/site-packages")
    return path


def test_the_wheel_installs_engramdb_as_its_only_top_level_name(tmp_path: Path) -> None:
    wheel_dir = tmp_path / "wheel"
    build_dir = REPO / "build"
    leftover = not build_dir.exists()  # setuptools builds in-tree; remove what this test made
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheel_dir), str(REPO)],
        check=True,
        capture_output=True,
    )
    if leftover:
        shutil.rmtree(build_dir, ignore_errors=True)
    (wheel,) = wheel_dir.glob("engramdb-*.whl")

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    site = _site_packages(env_dir)
    before = {p.name for p in site.iterdir()}
    subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
    )
    added = {p.name for p in site.iterdir()} - before
    top_level = {name for name in added if not name.endswith(".dist-info")}
    assert top_level == {"engramdb"}

    # run outside the checkout so the repository's folders cannot shadow the wheel
    probe = (
        "import importlib.resources as r, importlib.util as u, engramdb\n"
        "assert set(engramdb.__all__) >= {'Memory', 'Settings'}\n"
        "assert all(u.find_spec(n) is None for n in ('domain', 'services', 'infra', 'projections', 'bench'))\n"
        "assert r.files('engramdb.infra').joinpath('prompts', 'extraction_v1.md').is_file()\n"
        "print(engramdb.__file__)"
    )
    done = subprocess.run(
        [str(env_dir / "bin" / "python"), "-c", probe],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
    )
    assert str(site) in done.stdout
