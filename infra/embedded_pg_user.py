"""Running embedded PostgreSQL when engramdb runs as root: a dedicated system user.

Why its own module: PostgreSQL refuses to run as root, so as root the server runs as a
system user (default ``engramdb``, created once). Everything about that user — creating it,
checking it can reach its files without chmod-ing the user's parent folders, handing it the
data dir — is one job, apart from starting and stopping the server (ADR 0002).
"""

from __future__ import annotations

import logging
import os
import pwd
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engramdb.infra.embedded_base import EmbeddedServerError

log = logging.getLogger("engramdb.infra.embedded_postgres")

DEFAULT_SYSTEM_USER = "engramdb"


@dataclass(frozen=True)
class RunAs:
    name: str
    uid: int
    gid: int

    def kwargs(self) -> dict[str, Any]:
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def run_as_user(system_user: str | None) -> RunAs | None:
    """None when not root (postgres runs as us). As root: the dedicated user, created once."""
    if os.geteuid() != 0:
        return None
    name = system_user or os.environ.get("ENGRAMDB_PG_SYSTEM_USER") or DEFAULT_SYSTEM_USER
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        log.warning("running as root: creating system user %r for embedded PostgreSQL", name)
        try:
            subprocess.run(
                [
                    "useradd",
                    "--system",
                    "--no-create-home",
                    "--home-dir",
                    "/nonexistent",
                    "--shell",
                    "/usr/sbin/nologin",
                    "--user-group",
                    name,
                ],
                check=True,
                capture_output=True,
                text=True,
            )
        except (OSError, subprocess.CalledProcessError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            raise EmbeddedServerError(
                f"running as root, PostgreSQL needs a non-root user but `useradd {name}` failed "
                f"({detail.strip()}). Create the user yourself, run engramdb as a non-root user, "
                "or set ENGRAMDB_DATABASE_URL to an external server."
            ) from exc
        entry = pwd.getpwnam(name)
    if entry.pw_uid == 0:
        raise EmbeddedServerError(
            f"system user {name!r} has uid 0; PostgreSQL refuses to run as root"
        )
    return RunAs(name, entry.pw_uid, entry.pw_gid)


def can_access_as(run_as: RunAs, path: Path, test_flag: str) -> bool:
    """Ask the kernel (as ``run_as``, so ACLs count) whether ``test -<flag> path`` holds."""
    result = subprocess.run(
        ["test", f"-{test_flag}", str(path)], cwd="/", capture_output=True, **run_as.kwargs()
    )
    return result.returncode == 0


def check_reachable_as(run_as: RunAs, data_dir: Path) -> None:
    """Fail early (before creating anything) if the server user could not reach the data dir.
    (Binaries it cannot reach are copied into the data dir: ``embedded_pg_binaries``.)"""
    ancestor = data_dir.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not can_access_as(run_as, ancestor, "x"):
        raise EmbeddedServerError(
            f"running as root, embedded PostgreSQL runs as system user {run_as.name!r}, which "
            f"cannot reach {data_dir} because a parent directory is not traversable (e.g. a "
            "0700 home). engramdb will not chmod your parent folders. Fix one of: set "
            "ENGRAMDB_DATA_DIR to a directory whose parents are world-traversable (e.g. "
            f"/var/lib/engramdb); grant traverse only to that user (`setfacl -m u:{run_as.name}:x "
            "<each parent>`); run engramdb as a non-root user; or set ENGRAMDB_DATABASE_URL."
        )


def prepare_dirs_as_root(run_as: RunAs, data_dir: Path, pgdata: Path) -> None:
    # data_dir is engramdb's own directory: traverse (not list) permission for the server user.
    mode = data_dir.stat().st_mode
    if not mode & 0o001:
        data_dir.chmod((mode & 0o7777) | 0o001)
    pgdata.mkdir(mode=0o700, exist_ok=True)
    st = pgdata.stat()
    if st.st_uid != run_as.uid:
        for path in [pgdata, *pgdata.rglob("*")]:
            os.lchown(path, run_as.uid, run_as.gid)
    pgdata.chmod(0o700)
