"""``EmbeddedServers``: both embedded endpoints (PostgreSQL, NATS) behind one context manager.

It resolves both from ``Settings`` (external URLs win) and stops whatever it started on exit.
The supervision primitives live in ``embedded_base`` (``EmbeddedServerError`` re-exported);
this façade is the top of the stack — it imports ``database`` and ``embedded_nats``, which
import ``embedded_base``, and nothing below imports it back.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

from engramdb.infra.database import DatabaseConfig, ensure_extensions, resolve_database
from engramdb.infra.embedded_base import EmbeddedServerError as EmbeddedServerError
from engramdb.infra.embedded_nats import NatsHandle, ensure_nats

if TYPE_CHECKING:
    from engramdb.infra.settings import Settings


class EmbeddedServers:
    """``with EmbeddedServers(settings) as s:`` → ``s.database`` and ``s.nats_url``.

    External ``ENGRAMDB_DATABASE_URL`` / ``ENGRAMDB_NATS_URL`` are used as-is; otherwise the
    embedded servers in ``settings.data_dir`` are started or reused, and released on exit
    (stopped only if no other engramdb process still uses them).
    """

    def __init__(self, settings: Settings, *, create_extensions: bool = True) -> None:
        self.settings = settings
        self.create_extensions = create_extensions
        self._database: DatabaseConfig | None = None
        self._nats_handle: NatsHandle | None = None
        self._nats_url: str | None = None

    @property
    def database(self) -> DatabaseConfig:
        if self._database is None:
            raise RuntimeError("EmbeddedServers not started")
        return self._database

    @property
    def nats_url(self) -> str:
        if self._nats_url is None:
            raise RuntimeError("EmbeddedServers not started")
        return self._nats_url

    def start(self) -> EmbeddedServers:
        try:
            self._database = resolve_database(self.settings)
            if self.create_extensions:
                ensure_extensions(self._database.url)
            if self.settings.nats_url:
                self._nats_url = self.settings.nats_url
            else:
                self._nats_handle = ensure_nats(self.settings.data_dir)
                self._nats_url = self._nats_handle.url
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self._nats_handle is not None:
            self._nats_handle.stop()
            self._nats_handle = None
        if self._database is not None and self._database.handle is not None:
            self._database.handle.stop()
        self._database = None
        self._nats_url = None

    def __enter__(self) -> EmbeddedServers:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
