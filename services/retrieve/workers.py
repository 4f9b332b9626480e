"""Where a retrieve's side stages run: the threads and the connections beside the request's
own (ADR-0010).

Why a module of its own: this is the one place that decides which thread waits for what, and
the rule that keeps concurrent retrieves from deadlocking is easiest to check when it is all
here. Waits go one way only — the request thread (holding one read-pool connection) waits for
database workers, a database worker waits for the embedding thread, the embedding thread waits
for nothing of ours — and the database workers take connections only from the worker pool,
which has exactly one connection per worker thread. So no thread ever waits for a connection
from a pool it holds one of, and requests beyond the read pool's size queue for it instead of
deadlocking (before, the workers borrowed from the read pool the requests were holding: at
≥ pool-size concurrent requests every one timed out after 30 s).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


class Workers:
    """The embedding threads and, given a ``worker_pool``, one database worker thread per
    connection of it (its ``max_size``). Without a worker pool ``submit`` returns ``None`` and
    the caller runs the stage itself, on its own connection."""

    def __init__(self, worker_pool: Any = None, embed_workers: int = 2) -> None:
        self.pool = worker_pool
        # The embedding has threads of its own: the database workers wait for the vector, so
        # sharing their threads could leave the embedding queued behind its own waiters.
        self._embedding = ThreadPoolExecutor(
            max_workers=embed_workers, thread_name_prefix="engramdb-embed"
        )
        self._database = (
            ThreadPoolExecutor(
                max_workers=int(worker_pool.max_size), thread_name_prefix="engramdb-retrieve"
            )
            if worker_pool is not None
            else None
        )

    @property
    def concurrent(self) -> bool:
        return self._database is not None

    def embed(self, work: Callable[[str], T], text: str) -> Future[T]:
        return self._embedding.submit(work, text)

    def submit(self, work: Callable[..., T], *args: Any) -> Future[T] | None:
        """``work(*args)`` on a database worker, or ``None`` when there are none."""
        return None if self._database is None else self._database.submit(work, *args)

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A worker-pool connection (only for code running on a database worker)."""
        with self.pool.connection() as conn:
            yield conn

    def close(self) -> None:
        if self._database is not None:
            self._database.shutdown(wait=False, cancel_futures=True)
        self._embedding.shutdown(wait=False, cancel_futures=True)


def done(value: T) -> Future[T]:
    """An already-finished future (a stage that ran inline)."""
    future: Future[T] = Future()
    future.set_result(value)
    return future
