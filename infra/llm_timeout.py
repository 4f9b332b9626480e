"""``call_with_timeout``: the one way engramdb bounds a provider call in time.

Why a daemon thread that is abandoned (not a ``ThreadPoolExecutor``, not a cancel): a blocking
provider call cannot be interrupted from outside, so the enforceable equivalent is to stop
waiting for it. A daemon thread also never blocks interpreter exit, which an executor's worker
would. Extraction, entity resolution and the reranker all use this, so they fail the same way:
``TimeoutError`` (which is ``concurrent.futures.TimeoutError`` too) or the call's own error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


def call_with_timeout(fn: Callable[[], T], timeout: float, *, name: str = "engramdb-llm") -> T:
    """``fn()`` on a daemon thread named ``name``; its result, its exception, or
    ``TimeoutError`` after ``timeout`` seconds (the thread is then left to finish alone)."""
    future: Future[T] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 — handed to the caller via the future
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    try:
        return future.result(timeout=timeout)
    except TimeoutError:
        if future.done():  # the call itself raised TimeoutError: that is its own error
            raise
        raise TimeoutError(f"{name} exceeded {timeout:.2f}s") from None
