"""Recognise and clear what a killed embedded PostgreSQL left behind.

Why its own module: after ``kill -9`` a ``postmaster.pid`` and socket lock files remain, and
orphaned backends may still hold shared memory; ``pg_ctl start`` refuses until they are gone.
Telling a stale pid from a live server of *this* data dir (pids get recycled) is one job.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import psutil

from engramdb.infra.embedded_base import process_alive, wait_until

log = logging.getLogger("engramdb.infra.embedded_postgres")


def postgres_procs(pgdata: Path) -> list[psutil.Process]:
    """Processes of a server on ``pgdata``: every postgres process chdirs into its data dir."""
    found = []
    for proc in psutil.process_iter(["name"]):
        try:
            if proc.info["name"] == "postgres" and Path(proc.cwd()) == pgdata:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def read_postmaster_pid(pgdata: Path) -> tuple[int, int] | None:
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        return int(lines[0]), int(lines[3])
    except (OSError, ValueError, IndexError):
        return None


def live_postmaster(pgdata: Path) -> tuple[int, int] | None:
    """(pid, port) if postmaster.pid names a running postmaster of this pgdata, else None."""
    info = read_postmaster_pid(pgdata)
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


def recover_stale(pgdata: Path) -> None:
    """Clear what a killed server left behind so ``pg_ctl start`` does not refuse."""
    # Orphaned backends of a killed postmaster would keep its shared memory "in use".
    # (psutil.wait_procs would wait out zombies that only init can reap, so poll instead.)
    orphans = [p for p in postgres_procs(pgdata) if process_alive(p.pid)]
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
