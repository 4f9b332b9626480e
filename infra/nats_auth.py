"""NATS credentials and subject permissions for the embedded server (ADR-0011).

On first start the embedded server gets ``<data_dir>/nats-auth/`` (0700) holding
``users.json`` (the passwords, 0600) and ``nats-server.conf`` (0600, an ``authorization``
block in NATS's JSON-compatible config syntax). Two kinds of users:

- the **service** identity (``engramdb``): every subject — it runs ingest, answers
  ``<prefix>.retrieve``, manages streams, reads the message stream. Every engramdb process on
  this machine uses it: the embedded server's URL carries it (``nats://engramdb:…@127.0.0.1``).
- **publisher** identities (``engramdb nats-user create --agent A``): may publish only on
  ``<prefix>.messages.<token>`` and request ``<prefix>.retrieve.<token>`` for their agents
  (token = ``agent_token(agent_id)``), read the messages stream's info, and receive replies
  on their own inbox prefix ``_INBOX_<user>`` (so they cannot read other clients' replies).
  They connect with ``inbox_prefix="_INBOX_<user>"``.

Passwords are in clear in those 0600 files: nats-server only understands bcrypt besides
clear text, and the service's own password must be readable by its clients anyway.
Anonymous connections are refused (there is no ``no_auth_user``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from engramdb.infra.embedded_base import file_lock

SERVICE_USER = "engramdb"
AUTH_DIR = "nats-auth"


def auth_dir(data_dir: Path) -> Path:
    path = Path(data_dir) / AUTH_DIR
    path.mkdir(mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def _write_private(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def load_users(data_dir: Path) -> dict[str, Any]:
    """The users file, created with a fresh service password on first use."""
    path = auth_dir(data_dir) / "users.json"
    if path.is_file():
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data
    data = {
        "service": {"user": SERVICE_USER, "password": secrets.token_urlsafe(32)},
        "publishers": [],
    }
    _write_private(path, json.dumps(data, indent=2) + "\n")
    return data


def publisher_permissions(user: str, subjects: list[str], stream: str) -> dict[str, Any]:
    return {
        "publish": {"allow": [*subjects, f"$JS.API.STREAM.INFO.{stream}"]},
        "subscribe": {"allow": [f"_INBOX_{user}.>"]},
    }


def render_config(users: dict[str, Any], server: dict[str, Any] | None = None) -> str:
    """``server``: settings that are also given as flags (a reload refuses to see them
    change, e.g. ``server_name``), so they must be in the file too."""
    entries: list[dict[str, Any]] = [dict(users["service"])]
    for pub in users.get("publishers", []):
        entries.append(
            {
                "user": pub["user"],
                "password": pub["password"],
                "permissions": publisher_permissions(pub["user"], pub["subjects"], pub["stream"]),
            }
        )
    return json.dumps({**(server or {}), "authorization": {"users": entries}}, indent=2) + "\n"


def write_server_config(data_dir: Path, server: dict[str, Any] | None = None) -> Path:
    """(Re)write ``nats-server.conf`` from ``users.json`` (``server``: as given when the server
    started, kept in ``server.json`` for reloads); returns its path."""
    folder = auth_dir(data_dir)
    if server is None:
        saved = folder / "server.json"
        server = json.loads(saved.read_text(encoding="utf-8")) if saved.is_file() else {}
    else:
        _write_private(folder / "server.json", json.dumps(server) + "\n")
    path = folder / "nats-server.conf"
    _write_private(path, render_config(load_users(data_dir), server))
    return path


def new_publisher(
    data_dir: Path, agents: list[str], subjects: list[str], stream: str
) -> tuple[str, str]:
    """Add a publisher user allowed ``subjects``; returns (user, password). The caller
    reloads the server (``embedded_nats.reload_nats``)."""
    with file_lock(Path(data_dir) / "run" / "nats.lock"):  # one writer of users.json
        return _add_publisher(data_dir, agents, subjects, stream)


def _add_publisher(
    data_dir: Path, agents: list[str], subjects: list[str], stream: str
) -> tuple[str, str]:
    users = load_users(data_dir)
    user = f"pub-{secrets.token_hex(4)}"
    password = secrets.token_urlsafe(32)
    subjects = [sub.replace("{user}", user) for sub in subjects]  # per-user consumer names
    users.setdefault("publishers", []).append(
        {"user": user, "password": password, "agents": agents, "subjects": subjects,
         "stream": stream}
    )
    _write_private(auth_dir(data_dir) / "users.json", json.dumps(users, indent=2) + "\n")
    write_server_config(data_dir)
    return user, password


def with_credentials(url: str, user: str | None, password: str | None) -> str:
    """``url`` with ``user:password@`` (every server of a comma-separated list)."""
    if not user:
        return url
    # nats-py sends the URL's user/password as they are (no percent-decoding), and Python's
    # URL parser splits user info at the last '@' and first ':', so only these break it:
    if any(c in user for c in ":/?#@") or any(c in (password or "") for c in "/?#"):
        raise ValueError(
            "ENGRAMDB_NATS_USER may not contain : / ? # @ and ENGRAMDB_NATS_PASSWORD not / ? #"
            " (they cannot travel in a NATS URL); choose other credentials"
        )
    auth = user + (":" + password if password else "")
    out = []
    for server in url.split(","):
        server = server.strip()
        parts = urlsplit(server if "://" in server else f"nats://{server}")
        host = parts.netloc.rsplit("@", 1)[-1]
        out.append(urlunsplit(parts._replace(netloc=f"{auth}@{host}")))
    return ",".join(out)


def nats_servers(url: str) -> list[str]:
    """The servers of a comma-separated ``ENGRAMDB_NATS_URL`` (a cluster), for nats-py's and
    FastStream's ``servers=[...]`` (nats-py takes one string as one server)."""
    return [s.strip() for s in url.split(",") if s.strip()]


def redact_url(url: str | None) -> str:
    """For logs: ``nats://engramdb:***@127.0.0.1:4222``."""
    return re.sub(r"(//[^:/@]+:)[^/,]*@", r"\1***@", url or "")
