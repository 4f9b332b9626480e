"""Issue 28 item 5: keys follow the key file while a server runs — a key created after start
is accepted at once, a server started open closes as soon as the file exists, and a file
that disappears or breaks never opens it again (fail closed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engramdb.infra.api_keys import ApiKeyConfigError, add_key, hash_key
from engramdb.infra.key_reload import WatchedKeyRing, watch_keyring


def test_a_server_started_open_closes_when_keys_appear(tmp_path: Path) -> None:
    ring = watch_keyring(None, tmp_path)
    assert isinstance(ring, WatchedKeyRing) and not ring  # open: no key file yet
    key, grant = add_key(tmp_path / "api-keys.json", ["a:*"], ["read"])
    assert ring  # closed from the next request
    assert ring.find(key) == grant and ring.find("edb_other") is None
    second, _ = add_key(tmp_path / "api-keys.json", ["b:*"], ["write"])
    assert ring.find(second) is not None and ring.find(key) is not None  # both, no restart


def test_revoked_broken_and_deleted_files_fail_closed(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    key, _ = add_key(path, ["a:*"], ["admin"])
    ring = watch_keyring(str(path), tmp_path)
    assert ring.find(key) is not None
    path.write_text("{not json", encoding="utf-8")
    assert ring and ring.find(key) is not None  # broken: the last good keys stay
    path.write_text('{"keys": []}', encoding="utf-8")
    assert ring and ring.find(key) is None  # revoked: every key gone, still closed
    os.remove(path)
    assert ring and ring.find(key) is None  # deleted: refused, never open again
    path.write_text(f'[{{"sha256": "{hash_key(key)}", "agents": ["a:*"], "scopes": ["read"]}}]',
                    encoding="utf-8")
    assert ring.find(key) is not None  # back


def test_a_named_file_must_exist_at_start_and_inline_json_is_static(tmp_path: Path) -> None:
    with pytest.raises(ApiKeyConfigError, match="does not exist"):
        watch_keyring(str(tmp_path / "missing.json"), tmp_path)
    ring = watch_keyring('[{"key": "edb_x", "agents": ["*"], "scopes": ["read"]}]', tmp_path)
    assert not isinstance(ring, WatchedKeyRing) and ring.find("edb_x") is not None
