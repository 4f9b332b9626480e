"""Who uses an embedded server, for ``engramdb status`` (issue 28 item 4).

Why: with an embedded server down, ``status`` advised "start it with `engramdb serve`" even
while ``serve`` was running (and, since issue 28, restarting it). The client registry of
each server (``<data_dir>/run/<server>-clients``: one token per live handle, with pid and
start time) says which processes hold it; a live ``engramdb serve`` among them is named with
its pid, so the advice fits the situation.
"""

from __future__ import annotations

from pathlib import Path

import psutil

from engramdb.infra.embedded_base import process_alive, read_json

NAMES = {"postgres": "PostgreSQL", "nats": "NATS"}


def serve_pids(data_dir: Path, server: str) -> list[int]:
    """Pids of live ``engramdb serve`` processes holding a claim on ``server``."""
    pids = []
    directory = Path(data_dir).expanduser() / "run" / f"{server}-clients"
    for token in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        info = read_json(token)
        pid = info.get("pid")
        if not isinstance(pid, int) or not process_alive(pid, info.get("create_time")):
            continue
        try:
            cmdline = psutil.Process(pid).cmdline()
        except psutil.Error:
            continue
        if "serve" in cmdline and pid not in pids:
            pids.append(pid)
    return pids


def down_advice(data_dir: Path, server: str, url_setting: str) -> str:
    """Why the embedded ``server`` is down and what to do, told by who uses it."""
    label = NAMES[server]
    pids = serve_pids(data_dir, server)
    if pids:
        who = ", ".join(str(p) for p in pids)
        return (f"the embedded {label} in {data_dir} is not running; `engramdb serve` "
                f"(pid {who}) uses it and restarts it within seconds (check its log if not)")
    return (f"the embedded {label} in {data_dir} is not running "
            f"(start it with `engramdb serve`, or set {url_setting})")
