"""The ingest app in a daemon thread, for synchronous hosts (see ``IngestThread``)."""

from __future__ import annotations

import asyncio
import threading

from faststream import FastStream


class IngestThread:
    """Runs an ingest ``FastStream`` app on its own event loop in a daemon thread.

    For embedding the consumer in a synchronous process (``engramdb serve`` next to the HTTP
    server, the in-process facade, tests, benchmarks): ``start()`` returns once the broker
    is connected and the consumer subscribed; ``stop()`` drains and joins.
    """

    def __init__(self, app: FastStream) -> None:
        self.app = app
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._error: BaseException | None = None

    def start(self, timeout: float = 30.0) -> IngestThread:
        self._thread = threading.Thread(target=self._run, name="engramdb-ingest", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError("ingest app did not start in time")
        if self._error is not None:
            raise RuntimeError(f"ingest app failed to start: {self._error!r}") from self._error
        return self

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                async with self.app:
                    self._started.set()
                    await self._stop.wait()
            except BaseException as exc:  # noqa: BLE001 — reported to start()
                self._error = exc
                self._started.set()

        asyncio.run(main())

    def stop(self, timeout: float = 30.0) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> IngestThread:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
