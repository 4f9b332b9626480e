"""Supervision primitives shared by the embedded PostgreSQL and NATS servers.

Why this exists: on the embedded default engramdb owns its servers, but several engramdb
processes (CLI, ``serve``, tests) may point at the same ``data_dir``. They must cooperate
instead of fighting: one ``flock`` per server serialises start/stop decisions, and a
directory of *client tokens* (one per live handle, tagged with pid + process start time so a
recycled pid is not mistaken for a live client) is the reference count. The last client to
leave stops the server; a crashed client's token is pruned on the next look. See
``ADR/0002-embedded-servers.md``.

This module is the bottom of the embedded stack: it imports no other engramdb module, so
``embedded_postgres`` / ``embedded_nats`` build on it and the ``embedded`` façade (which
needs ``database``) sits on top — imports go one way, no cycle.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import psutil


class EmbeddedServerError(RuntimeError):
    """An embedded server could not be started; the message says what to do about it."""


def run_dir(data_dir: Path) -> Path:
    """Root-only bookkeeping directory (locks, state with the DB password, client tokens)."""
    path = data_dir / "run"
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


@contextlib.contextmanager
def file_lock(path: Path, timeout: float = 120.0) -> Iterator[None]:
    """Exclusive inter-process lock (flock: released by the kernel if the holder dies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise EmbeddedServerError(f"timed out waiting for lock {path}") from None
                time.sleep(0.05)
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomic write, mode 0600 (the postgres state holds a password)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


# A start time above this is seconds since the epoch (claims written before the start times
# became seconds since boot); below it, seconds since boot (an uptime of 30 years)
_EPOCH_FORM = 1e9
# psutil's epoch form adds /proc/stat's ``btime``, whole seconds that move by one when the
# clock is slewed or stepped: an epoch-form claim may be off by that much and still be its owner
_EPOCH_SLACK = 1.5


def process_start_time(pid: int) -> float | None:
    """When ``pid`` started, in seconds since boot: with the pid, the identity of a process
    that no clock change moves.

    Why not psutil's ``create_time()``: it adds the boot time of ``/proc/stat``, which the
    kernel derives from the wall clock in whole seconds — a clock slewed by NTP during a run
    moves it by a second, and a claim compared to 10 ms then looked dead: its server was
    stopped under the process that held it (the likely end of a CI run whose PostgreSQL and
    NATS died mid-suite). Linux: the start of ``/proc/<pid>/stat`` in clock ticks; elsewhere
    psutil's epoch form."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, ``starttime``
    except (OSError, IndexError, ValueError):
        pass
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def process_alive(pid: int, create_time: float | None = None) -> bool:
    """True if ``pid`` runs (not a zombie) and, if given, was started at ``create_time``
    (``process_start_time``'s, or the epoch form an older release wrote)."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        if create_time is None:
            return True
        if create_time > _EPOCH_FORM:
            return abs(proc.create_time() - create_time) < _EPOCH_SLACK
        started = process_start_time(pid)
        return started is not None and abs(started - create_time) < 0.01
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # like the servers themselves: TIME_WAIT leftovers of the last run must not count
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(preferred: int | None = None, host: str = "127.0.0.1") -> int:
    """Reuse the port of the last run when it is free (stable URLs), else ask the kernel."""
    if preferred and port_is_free(preferred, host):
        return preferred
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Any, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def release_claim(
    data_dir: Path, token: Path, server: str, stop_server: Callable[[Path], None]
) -> None:
    """Drop one client token of ``server`` ("postgres", "nats"); stop the server (with
    ``stop_server``) if it was the last live client. Holds the server's start lock, so a
    concurrent ``ensure_*`` never sees a server that is being stopped as reusable."""
    runs = data_dir / "run"
    if not runs.is_dir():  # data dir deleted meanwhile: nothing left to release
        return
    with file_lock(runs / f"{server}.lock"):
        registry = ClientRegistry(runs / f"{server}-clients")
        registry.unregister(token)
        if registry.live_count() == 0:
            stop_server(data_dir)


class ReleasableHandle:
    """What the PostgreSQL and NATS handles share: ``stop()`` releases this process's claim
    (idempotent) and the server stops when no live claim remains; usable with ``with``.
    Subclasses are dataclasses with ``data_dir`` and ``_token`` fields, name their server
    (``server``, the stem of its lock and claims) and say how to stop it."""

    server: ClassVar[str]
    data_dir: Path
    _token: Path | None

    @staticmethod
    def _stop_server(data_dir: Path) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        if self._token is None:
            return
        token, self._token = self._token, None
        release_claim(self.data_dir, token, self.server, self._stop_server)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ClientRegistry:
    """Reference count of live handles on one server, as token files in a directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def register(self) -> Path:
        pid = os.getpid()
        token = self.directory / f"{pid}-{uuid.uuid4().hex}.json"
        write_json(token, {"pid": pid, "create_time": process_start_time(pid)})
        return token

    def unregister(self, token: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            token.unlink()

    def live_count(self) -> int:
        """Prune tokens of dead processes and count the rest (see ``prune``)."""
        count = 0
        for token in self.directory.glob("*.json"):
            info = read_json(token)
            pid = info.get("pid")
            if isinstance(pid, int) and process_alive(pid, info.get("create_time")):
                count += 1
            else:
                with contextlib.suppress(FileNotFoundError):
                    token.unlink()
        return count

    def prune(self) -> None:
        """Drop only the claims of dead processes.

        Why not clear them all when a crashed server is restarted: a live process (``serve``)
        still holds its claim on the *data dir's* server, whichever instance runs now; without
        its claim the restarting process would count itself the last user and later stop the
        server under ``serve``. A claim is removed only by its owner or when its owner is dead
        (pid + start time, so a recycled pid does not count).
        """
        self.live_count()
