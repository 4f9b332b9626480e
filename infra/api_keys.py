"""HTTP API keys: what a key may touch (agent patterns × scopes), stored as hashes (ADR-0011).

A key is ``edb_`` + 43 random URL-safe characters (256 bits), so a plain SHA-256 of it is a
safe thing to store: there is nothing to brute-force, and a slow password hash would only
slow every request down. Key files written by ``engramdb keys create`` hold only hashes; an
inline ``ENGRAMDB_API_KEYS`` JSON value (handy in compose files) may also give a ``key`` in
clear, which is hashed on load.

Each entry grants ``scopes`` (``read``, ``write``, ``admin``; admin implies both others) on
``agents``: exact ids (``agent-1``), prefixes ending in ``*`` (``team-a:*``) or ``*`` (all).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SCOPES = ("read", "write", "admin")
KEY_PREFIX = "edb_"
KEYS_FILE_NAME = "api-keys.json"


class ApiKeyConfigError(ValueError):
    """The configured keys cannot be used; the message says what to fix."""


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def agent_matches(pattern: str, agent_id: str) -> bool:
    if pattern.endswith("*"):
        return agent_id.startswith(pattern[:-1])
    return agent_id == pattern


@dataclass(frozen=True)
class Grant:
    """One key: its hash, the agents it covers and what it may do with them."""

    key_id: str
    sha256: str
    agents: tuple[str, ...]
    scopes: frozenset[str]
    note: str = ""

    def allows(self, scope: str, agent_id: str | None = None) -> bool:
        """``agent_id=None``: the scope on at least one agent (or an agent-less admin call)."""
        if scope not in self.scopes and "admin" not in self.scopes:
            return False
        if agent_id is None:
            return True
        return any(agent_matches(p, agent_id) for p in self.agents)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.key_id,
            "sha256": self.sha256,
            "agents": list(self.agents),
            "scopes": sorted(self.scopes),
            "note": self.note,
        }


def _grant(entry: Any, where: str) -> Grant:
    if not isinstance(entry, dict):
        raise ApiKeyConfigError(f"{where}: each key must be a JSON object")
    if "key" in entry:
        digest = hash_key(str(entry["key"]))
    elif isinstance(entry.get("sha256"), str) and len(entry["sha256"]) == 64:
        digest = entry["sha256"].lower()
    else:
        raise ApiKeyConfigError(f"{where}: a key needs 'sha256' (64 hex chars) or 'key'")
    agents = entry.get("agents")
    if not isinstance(agents, list) or not agents or not all(isinstance(a, str) and a for a in agents):
        raise ApiKeyConfigError(f"{where}: 'agents' must be a non-empty list, e.g. [\"team-a:*\"]")
    scopes = entry.get("scopes")
    if not isinstance(scopes, list) or not scopes or not set(scopes) <= set(SCOPES):
        raise ApiKeyConfigError(f"{where}: 'scopes' must be a non-empty subset of {list(SCOPES)}")
    return Grant(
        key_id=str(entry.get("id") or digest[:8]),
        sha256=digest,
        agents=tuple(agents),
        scopes=frozenset(scopes),
        note=str(entry.get("note") or ""),
    )


@dataclass
class KeyRing:
    """All configured keys; ``find(key)`` is the grant for a presented bearer token."""

    grants: list[Grant] = field(default_factory=list)
    source: str = ""

    def __post_init__(self) -> None:
        self._by_hash = {g.sha256: g for g in self.grants}

    def __bool__(self) -> bool:
        return bool(self.grants)

    def find(self, key: str) -> Grant | None:
        return self._by_hash.get(hash_key(key))

    @classmethod
    def parse(cls, data: Any, source: str) -> KeyRing:
        entries = data.get("keys") if isinstance(data, dict) else data
        if not isinstance(entries, list):
            raise ApiKeyConfigError(f"{source}: expected a list of keys or {{\"keys\": [...]}}")
        return cls([_grant(e, f"{source} key #{i + 1}") for i, e in enumerate(entries)], source)


def read_keys_file(path: Path) -> KeyRing:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ApiKeyConfigError(
            f"ENGRAMDB_API_KEYS names {path}, which does not exist; create a key with "
            "`engramdb keys create --agents 'a:*' --scope read`"
        ) from None
    except (OSError, ValueError) as exc:
        raise ApiKeyConfigError(f"cannot read API keys from {path}: {exc}") from None
    return KeyRing.parse(data, str(path))


def default_keys_path(data_dir: Path) -> Path:
    return Path(data_dir).expanduser() / KEYS_FILE_NAME


def load_keyring(api_keys: str | None, data_dir: Path) -> KeyRing:
    """``ENGRAMDB_API_KEYS`` as inline JSON (starts with ``[`` or ``{``) or a file path;
    unset → ``<data_dir>/api-keys.json`` if it exists, else no keys (open on loopback)."""
    value = (api_keys or "").strip()
    if value.startswith(("[", "{")):
        try:
            return KeyRing.parse(json.loads(value), "ENGRAMDB_API_KEYS")
        except ValueError as exc:
            if isinstance(exc, ApiKeyConfigError):
                raise
            raise ApiKeyConfigError(f"ENGRAMDB_API_KEYS is not valid JSON: {exc}") from None
    if value:
        return read_keys_file(Path(value).expanduser())
    default = default_keys_path(data_dir)
    return read_keys_file(default) if default.is_file() else KeyRing(source="none")


def add_key(
    path: Path, agents: Iterable[str], scopes: Iterable[str], note: str = ""
) -> tuple[str, Grant]:
    """Create a key, append its hash to ``path`` (mode 0600) and return (key, grant)."""
    key = new_key()
    grant = _grant(
        {"key": key, "agents": list(agents), "scopes": list(scopes), "note": note}, "new key"
    )
    entries: list[Any] = []
    if path.is_file():
        read_keys_file(path)  # refuse to extend a file that does not parse
        data = json.loads(path.read_text(encoding="utf-8"))
        entries = list((data.get("keys") if isinstance(data, dict) else data) or [])
    entries.append({**grant.to_json(), "created_at": datetime.now(UTC).isoformat()})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({"keys": entries}, fh, indent=2)
        fh.write("\n")
    os.replace(tmp, path)
    return key, grant
