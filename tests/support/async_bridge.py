"""Drive an ``AsyncMemory`` from synchronous test code, so the sync facade's behavioural tests
run unchanged against the async API (issue 24: "the async API passes the behavioural tests of
the sync one").

The bridge owns one event loop in a thread; every method call is a coroutine of the
``AsyncMemory`` scheduled there, and the test thread waits for its result. Only awaitable
methods are bridged: an attribute that is not a coroutine function (``sync``) is returned as is.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

from engramdb.services.memory.async_facade import AsyncMemory


class SyncBridge:
    def __init__(self, memory: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.facade = AsyncMemory(memory, owns_memory=False)

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.facade, name, None)
        if not inspect.iscoroutinefunction(target):
            return getattr(self.facade.sync, name)  # e.g. ``app``, ``pool`` of the one cell
        assert target is not None

        def call(*args: Any, **kwargs: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(target(*args, **kwargs), self._loop).result()

        return call

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.facade.close(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
