"""Batched projection processing on top of eventsourcing's ``ProjectionRunner``.

The library's runner calls ``projection.process_event`` once per event, and our views commit
one transaction per call: BEGIN, tracking upsert, rows, COMMIT, plus an embedding-cache
round trip — per event, per projection. Under write load that, not SQL work, bounds how fast
facts become visible.

``BatchingProjectionRunner`` keeps everything else of the library (view construction from
the env, the subscription resuming after ``max_tracking_id``, the stop thread, error
propagation through ``run_forever``/``__exit__``) and replaces only the processing loop:
block for the first event, then take every event the subscription has ALREADY fetched
(never blocking on the database) up to ``max_batch_events``, optionally lingering
``max_batch_wait`` seconds for more, and hand the list to ``projection.process_events``
once. The view applies the list in one transaction that records the tracking position of
the last event, so a failure mid-batch rolls the whole batch back and a restarted runner
resumes from the last committed position (exactly-once is per batch instead of per event).

Why peek at the subscription's buffer instead of a read-ahead thread: eventsourcing's
``ListenNotifySubscription`` already pulls pages of up to 500 notifications into a list and a
queue of such lists; ``next()`` cannot block while either is non-empty. Reading that state is
cheaper and simpler than another thread with its own stop protocol. If a future library
version renames it, ``_buffered`` answers False and batches degrade to one event each —
slower, still correct (``tests/integration/test_projections.py`` asserts batches > 1 happen).
"""

from __future__ import annotations

import time
import weakref
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from threading import Event
from traceback import format_exc
from typing import Any, ClassVar, TypeVar
from warnings import warn

from eventsourcing.persistence import Tracking, TrackingRecorder
from eventsourcing.projection import Projection, ProjectionRunner

TView = TypeVar("TView", bound=TrackingRecorder)

MAX_BATCH_EVENTS = 500  # = the subscription's page size: one page, one transaction
MAX_BATCH_WAIT = 0.0  # seconds to linger for more events; 0 = take only what is buffered
_LINGER_POLL = 0.0005

Batch = Sequence[tuple[Any, Tracking]]


class BatchProjection(Projection[TView]):
    """A projection that processes lists of (event, tracking) in one view transaction."""

    max_batch_events: ClassVar[int] = MAX_BATCH_EVENTS
    max_batch_wait: ClassVar[float] = MAX_BATCH_WAIT

    @abstractmethod
    def process_events(self, batch: Batch) -> None:
        """Apply ``batch`` (ascending positions) atomically, tracking its last position."""

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:  # type: ignore[override]
        self.process_events([(domain_event, tracking)])


def with_batching(
    projection_class: type[BatchProjection[Any]],
    max_events: int | None = None,
    max_wait: float | None = None,
) -> type[BatchProjection[Any]]:
    """A subclass with other batch limits (the runner constructs projections from a class)."""
    if max_events is None and max_wait is None:
        return projection_class
    attrs: dict[str, Any] = {"name": projection_class.name, "__module__": projection_class.__module__}
    if max_events is not None:
        if max_events < 1:
            raise ValueError("max_events must be >= 1")
        attrs["max_batch_events"] = max_events
    if max_wait is not None:
        attrs["max_batch_wait"] = max(0.0, max_wait)
    return type(projection_class.__name__, (projection_class,), attrs)


def _buffered(subscription: Any) -> bool:
    """True if ``next(subscription)`` returns without waiting for the database.

    ``subscription`` is an ``ApplicationSubscription``; its ``.subscription`` is the
    recorder's ``ListenNotifySubscription`` (a list being consumed + a queue of pulled pages).
    Only the processing thread consumes, so a True answer cannot go stale.
    """
    inner = getattr(subscription, "subscription", None)
    try:
        if inner._notifications_index < len(inner._notifications):  # type: ignore[union-attr]  # noqa: SLF001
            return True
        return bool(inner._notifications_queue.qsize() > 0)  # type: ignore[union-attr]  # noqa: SLF001
    except AttributeError:
        return False


def next_batch(
    subscription: Iterator[tuple[Any, Tracking]],
    first: tuple[Any, Tracking],
    max_events: int,
    max_wait: float,
    is_stopping: Event,
) -> list[tuple[Any, Tracking]]:
    """``first`` plus what is already available, up to ``max_events`` / ``max_wait`` s."""
    batch = [first]
    deadline = time.monotonic() + max_wait
    while len(batch) < max_events and not is_stopping.is_set():
        if _buffered(subscription):
            try:
                batch.append(next(subscription))
            except StopIteration:
                break
        elif max_wait > 0 and time.monotonic() < deadline:
            time.sleep(_LINGER_POLL)
        else:
            break
    return batch


class BatchingProjectionRunner(ProjectionRunner[Any, TView]):
    """``ProjectionRunner`` whose processing thread applies events in batches."""

    @staticmethod
    def _process_events_loop(  # type: ignore[override]
        subscription: Any,
        projection: Any,
        is_stopping: Event,
        runner: weakref.ReferenceType[Any],
    ) -> None:
        """The library's loop (same error/stop handling), one ``process_events`` per batch."""
        try:
            if not isinstance(projection, BatchProjection):
                for domain_event, tracking in subscription:
                    projection.process_event(domain_event, tracking)
                return
            max_events, max_wait = projection.max_batch_events, projection.max_batch_wait
            for first in subscription:
                batch = next_batch(subscription, first, max_events, max_wait, is_stopping)
                if is_stopping.is_set():
                    break  # not applied, not tracked: the next runner starts from here
                projection.process_events(batch)
        except BaseException as e:
            _runner = runner()
            if _runner is not None:
                _runner._thread_error = e  # noqa: SLF001
            else:
                warn(
                    "ProjectionRunner was deleted before error could be assigned:\n"
                    + format_exc(),
                    RuntimeWarning,
                    stacklevel=2,
                )
        finally:
            is_stopping.set()
