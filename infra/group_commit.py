"""Group commit: concurrent ``app.save`` calls coalesced into one event-store transaction.

Event-store plumbing, not a write-pipeline decision: it knows aggregates and events only
through the eventsourcing ``Application`` it saves with, so it lives in infra (and imports
no service or projection). ``WritePipeline.commits`` is the one user (ADR-0004).
"""

from __future__ import annotations

import threading
from typing import Any

from eventsourcing.application import Application
from eventsourcing.persistence import InterfaceError, OperationalError


class _Pending:
    """One caller's save waiting in a ``GroupCommit`` (its events are already collected)."""

    __slots__ = ("events", "aggregates", "wake", "lead", "done", "recordings", "error")

    def __init__(self, events: list[Any], aggregates: list[Any]) -> None:
        self.events = events
        self.aggregates = aggregates
        self.wake = threading.Event()
        self.lead = False
        self.done = False
        self.recordings: list[Any] = []
        self.error: BaseException | None = None


class GroupCommit:
    """Coalesces concurrent ``app.save`` calls into one event-store transaction.

    Why: every insert into the events table takes a table lock (gap-free notification ids),
    so concurrent saves queue behind each other anyway; their fixed cost (round trips, lock,
    commit) dominates a small save. Here the first caller becomes the *leader* and saves,
    in one transaction, everything queued while the previous transaction ran; the others
    wait and get their own slice of recordings. Semantics per caller are unchanged: a save
    returns only once its events are committed, and if the shared transaction fails for a
    reason that may be one member's own (``RecordConflictError``: one member's aggregate
    moved on, or a redelivered record; or a value the database refuses), each member is
    saved alone so only the guilty one sees the error. A single writer pays one
    uncontended lock.
    """

    def __init__(self, app: Application[Any], max_group: int = 128, enabled: bool = True) -> None:
        self.app = app
        self.max_group = max_group
        self.enabled = enabled  # False: every save is its own transaction (baseline for benches)
        self._mutex = threading.Lock()
        self._queue: list[_Pending] = []
        self._busy = False
        self.stats = {"saves": 0, "transactions": 0, "split": 0}

    def save(self, *objs: Any) -> list[Any]:
        """Like ``app.save(*aggregates)``; raises what a solo save of them would raise."""
        events: list[Any] = []
        aggregates: list[Any] = []
        for obj in objs:
            if obj is None:
                continue
            events.extend(obj.collect_events())
            aggregates.append(obj)
        item = _Pending(events, aggregates)
        if not self.enabled:
            self.stats["saves"] += 1
            self._solo(item)
            if item.error is not None:
                raise item.error
            return item.recordings
        with self._mutex:
            self._queue.append(item)
            if self._busy:
                lead = False
            else:
                self._busy = lead = True
        if not lead:
            item.wake.wait()
        if not item.done:  # leader from the start, or handed the lead by the previous one
            try:
                while not item.done:
                    with self._mutex:
                        group = self._queue[: self.max_group]
                        del self._queue[: self.max_group]
                    self._commit(group)
            finally:
                with self._mutex:
                    if self._queue:
                        successor = self._queue[0]
                        successor.lead = True
                        successor.wake.set()
                    else:
                        self._busy = False
        if item.error is not None:
            raise item.error
        return item.recordings

    def _commit(self, group: list[_Pending]) -> None:
        self.stats["saves"] += len(group)
        try:
            if len(group) == 1:
                self._solo(group[0])
                return
            self.stats["transactions"] += 1
            try:
                # Pending events were collected already: pass them as events, and the
                # aggregates (now with nothing pending) so the cache and snapshots see them.
                recordings = self.app.save(
                    *[e for p in group for e in p.events], *[a for p in group for a in p.aggregates]
                )
            except (InterfaceError, OperationalError) as exc:
                # Database unreachable (already retried by the store): every member failed
                # alike, and N more attempts would only keep them all waiting.
                for pending in group:
                    pending.error = exc
                return
            except Exception:  # noqa: BLE001
                # A conflict, or an error that may be one member's own (a value the database
                # or the transcoder refuses): each member on its own, so only the guilty one
                # fails and the others are saved, as if each had saved alone.
                self.stats["split"] += 1
                for pending in group:
                    self._solo(pending)
                return
            except BaseException as exc:  # interrupted: nobody was saved
                for pending in group:
                    pending.error = exc
                return
            start = 0
            for pending in group:
                pending.recordings = recordings[start : start + len(pending.events)]
                start += len(pending.events)
        finally:
            for pending in group:
                pending.done = True
                pending.wake.set()

    def _solo(self, pending: _Pending) -> None:
        self.stats["transactions"] += 1
        try:
            pending.recordings = self.app.save(*pending.events, *pending.aggregates)
        except BaseException as exc:  # noqa: BLE001 — re-raised in the caller's thread
            pending.error = exc
