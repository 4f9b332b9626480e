"""A key ring that follows its key file (issue 28 item 5, ADR-0051).

Why: ``serve`` and ``mcp --transport http`` used to read the keys once at start, so a key
made by ``engramdb keys create`` while they ran got 401 until a restart, and a server started
open (no key file yet) stayed open after the first key existed. ``WatchedKeyRing`` stats the
file on every lookup (a few microseconds beside a request) and re-reads it when its identity
(inode, size, mtime) changed, so a new or revoked key counts from the next request.

Fail closed: once the file has existed, a file that disappears or no longer parses never
opens the server again — a missing file then denies every key, a broken one keeps the last
good keys — and each such change is logged once. Inline ``ENGRAMDB_API_KEYS`` JSON cannot
change while the process runs and stays a plain ``KeyRing``.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from engramdb.infra.api_keys import (
    ApiKeyConfigError,
    Grant,
    KeyRing,
    default_keys_path,
    load_keyring,
    read_keys_file,
)

log = logging.getLogger("engramdb.keys")
_Signature = tuple[int, int, int] | None


def _signature(path: Path) -> _Signature:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class WatchedKeyRing(KeyRing):
    """The keys of ``path``, re-read when the file changes (see the module doc)."""

    def __init__(self, path: Path) -> None:
        super().__init__([], str(path))
        self.path = path
        self._lock = threading.Lock()
        self._seen: _Signature = None
        self._closed = False  # the file existed once: never open again
        self.reloads = 0
        self._refresh()

    def _refresh(self) -> None:
        signature = _signature(self.path)
        if signature == self._seen:
            return
        with self._lock:
            if signature == self._seen:
                return
            self._seen = signature
            if signature is None:
                if self._closed:
                    log.warning("API key file %s is gone: every key is refused", self.path)
                    self._set([])
                return
            try:
                ring = read_keys_file(self.path)
            except ApiKeyConfigError as exc:
                self._closed = True
                log.error("API key file changed but cannot be used (keeping the last good "
                          "keys, %d): %s", len(self.grants), exc)
                return
            self._closed = True
            self._set(ring.grants)
            self.reloads += 1
            log.info("API keys loaded from %s: %d key(s)", self.path, len(ring.grants))

    def _set(self, grants: list[Grant]) -> None:
        self.grants = list(grants)
        self._by_hash = {g.sha256: g for g in grants}

    def __bool__(self) -> bool:
        """Keys required: the file has existed (even if it is now empty, gone or broken)."""
        self._refresh()
        return self._closed

    def find(self, key: str) -> Grant | None:
        self._refresh()
        return super().find(key)


def watch_keyring(api_keys: str | None, data_dir: Path) -> KeyRing:
    """Like ``load_keyring`` (raises ``ApiKeyConfigError`` on a broken source at start), but a
    key FILE — named by ``ENGRAMDB_API_KEYS`` or the default ``<data_dir>/api-keys.json``,
    existing yet or not — is followed while the process runs."""
    value = (api_keys or "").strip()
    if value.startswith(("[", "{")):
        return load_keyring(value, data_dir)
    path = Path(value).expanduser() if value else default_keys_path(data_dir)
    if value or path.is_file():
        read_keys_file(path)  # a named file that is missing or broken stops the start
    return WatchedKeyRing(path)
