"""``AsyncMemory``: the ``Memory`` facade for asyncio callers, same names, arguments, results.

Why threads and not a second, native-async pipeline (ADR-0047): a retrieve is mostly CPU
(embedding, fusion, formatting; ADR-0038/0042) plus a few pooled psycopg queries that the
retriever already runs in parallel on its own threads (ADR-0010, 0041); a write is the
pipeline's locked, group-committed decision under per-agent locks. Re-writing both on
``psycopg.AsyncConnectionPool`` would fork every stage into two implementations to keep
byte-identical, and would not make the CPU part concurrent. So every call runs the sync
facade on a bounded thread pool owned by this object: the event loop only awaits a future,
never a socket or a lock, and the bound stops a burst of callers from opening more database
connections than the pools hold (they queue here instead of inside psycopg's pool timeout).

Cancellation: a read that is cancelled returns at once (its thread finishes and the result is
dropped). A command (``write``, ``delete_fact``, ``forget_agent``, ``erase_agent``,
``reprocess``...) that is cancelled before its thread started never runs — nothing is
recorded; once started it runs to its end and the cancellation is re-raised after it, so a
cancelled write is either fully recorded or not at all, never half (the pipeline itself has
no cancellation point between its stages).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import Any, TypeVar

from engramdb.projections.rebuild import RebuildReport
from engramdb.services.management.audit_models import FactSnapshot, HistoryEntry
from engramdb.services.management.models import (
    AgentItem,
    DeleteResult,
    EntityItem,
    EraseResult,
    FactDetail,
    FactItem,
    FactStatus,
    ForgetResult,
    MessageItem,
    Page,
    ReprocessResult,
    UpdateResult,
)
from engramdb.services.management.pending import PendingExtraction, ReprocessReport
from engramdb.services.memory.facade import Memory
from engramdb.services.observability.health import HealthReport
from engramdb.services.retrieve.models import RetrieveResult
from engramdb.services.write.models import WriteResult

T = TypeVar("T")

DEFAULT_MAX_THREADS = 16
"""Calls in flight at once per ``AsyncMemory``; the rest wait on the event loop (not in a
thread). 16 is the default read pool's size, so a full pool never makes a caller time out."""


class AsyncMemory:
    """Long-term memory for asyncio code. ``await AsyncMemory.open(...)`` takes ``Memory.open``'s
    arguments; ``AsyncMemory(memory)`` wraps an open ``Memory`` (its pools are shared: one
    process, one set of pools, whichever API calls them). Use ``async with`` or ``await close()``.
    """

    def __init__(
        self, memory: Memory, *, max_threads: int = DEFAULT_MAX_THREADS, owns_memory: bool = True
    ) -> None:
        if max_threads < 1:
            raise ValueError("max_threads must be at least 1")
        self.sync = memory
        self._owns = owns_memory
        self._threads = ThreadPoolExecutor(max_threads, thread_name_prefix="engramdb-async")

    @classmethod
    async def open(cls, *args: Any, max_threads: int = DEFAULT_MAX_THREADS,
                   **kwargs: Any) -> AsyncMemory:
        """``Memory.open(*args, **kwargs)`` on a thread (it connects, migrates and may start the
        embedded PostgreSQL: seconds the event loop must not wait for)."""
        memory = await asyncio.to_thread(functools.partial(Memory.open, *args, **kwargs))
        return cls(memory, max_threads=max_threads)

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Wait for commands still running (a cancelled write finishes first), then close the
        wrapped ``Memory`` if this object opened it."""
        await asyncio.to_thread(self._threads.shutdown, True)
        if self._owns:
            await asyncio.to_thread(self.sync.close)

    # ----- running sync calls ---------------------------------------------------------------

    async def _read(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A call without effects: cancelling it returns at once."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._threads, functools.partial(fn, *args, **kwargs))

    async def _command(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A call with effects: all or nothing under cancellation (see the module docstring)."""
        started: Future[T] = self._threads.submit(fn, *args, **kwargs)
        waiting = asyncio.wrap_future(started)
        try:
            return await asyncio.shield(waiting)
        except asyncio.CancelledError:
            if not started.cancel():  # already running: let it finish, then report the cancel
                with contextlib.suppress(BaseException):
                    await asyncio.shield(waiting)
            raise

    # ----- the three uses -----------------------------------------------------------------

    async def write(
        self,
        agent_id: str,
        text: str,
        *,
        speaker: str | None = None,
        session_id: str | None = None,
        occurred_at: datetime | None = None,
        message_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        dry_run: bool = False,
        infer: bool = True,
    ) -> WriteResult:
        """``Memory.write``: record one message and its decisions (idempotent on message_id);
        ``infer=False``: the turn only (ADR-0049)."""
        return await self._command(
            self.sync.write, agent_id, text, speaker=speaker, session_id=session_id,
            occurred_at=occurred_at, message_id=message_id, metadata=metadata, dry_run=dry_run,
            infer=infer,
        )

    async def add_facts(self, agent_id: str, facts: Any, *, via: str = "add_facts") -> WriteResult:
        """``Memory.add_facts``: facts the client decided, reconciled (ADR-0049)."""
        return await self._command(self.sync.add_facts, agent_id, facts, via=via)

    async def retrieve(
        self,
        agent_id: str,
        query: str,
        *,
        as_of: datetime | None = None,
        wait_for: int | None = None,
        config_overrides: dict[str, Any] | None = None,
        session_id: str | Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> RetrieveResult:
        """``Memory.retrieve``: the facts and conversations that matter for ``query``."""
        return await self._read(
            self.sync.retrieve, agent_id, query, as_of=as_of, wait_for=wait_for,
            config_overrides=config_overrides, session_id=session_id, metadata=metadata,
        )

    async def wait_for_projections(
        self, position: int | None = None, timeout: float = 30.0, *, agent_id: str | None = None
    ) -> None:
        await self._read(self.sync.wait_for_projections, position, timeout, agent_id=agent_id)

    async def health(self, max_lag: int | None = None, timeout: float = 2.0) -> HealthReport:
        return await self._read(self.sync.health, max_lag, timeout)

    # ----- audit --------------------------------------------------------------------------

    async def history(self, agent_id: str, fact_id: str | None = None) -> list[HistoryEntry]:
        return await self._read(self.sync.history, agent_id, fact_id)

    async def facts_as_of(self, agent_id: str, as_of: datetime) -> list[FactSnapshot]:
        return await self._read(self.sync.facts_as_of, agent_id, as_of)

    # ----- management (read models) --------------------------------------------------------

    async def list_facts(
        self,
        agent_id: str,
        *,
        status: FactStatus | None = None,
        entity: str | None = None,
        session: str | None = None,
        speaker: str | None = None,
        valid_at: datetime | None = None,
        as_of: datetime | None = None,
        text: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        metadata: dict[str, Any] | None = None,
        category: str | None = None,
    ) -> Page[FactItem]:
        return await self._read(
            self.sync.list_facts, agent_id, status=status, entity=entity, session=session,
            speaker=speaker, valid_at=valid_at, as_of=as_of, text=text, limit=limit,
            cursor=cursor, metadata=metadata, category=category,
        )

    async def get_fact(self, agent_id: str, fact_id: str) -> FactDetail:
        return await self._read(self.sync.get_fact, agent_id, fact_id)

    async def list_entities(
        self, agent_id: str, *, limit: int = 50, cursor: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Page[EntityItem]:
        return await self._read(self.sync.list_entities, agent_id, limit=limit, cursor=cursor,
                                metadata=metadata)

    async def list_agents(
        self, *, limit: int = 50, cursor: str | None = None, agents: Sequence[str] | None = None
    ) -> Page[AgentItem]:
        return await self._read(self.sync.list_agents, limit=limit, cursor=cursor, agents=agents)

    async def list_messages(
        self,
        agent_id: str,
        *,
        session: str | None = None,
        speaker: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Page[MessageItem]:
        return await self._read(
            self.sync.list_messages, agent_id, session=session, speaker=speaker, limit=limit,
            cursor=cursor, metadata=metadata,
        )

    async def pending_extractions(
        self, agent_id: str | None = None, limit: int | None = None
    ) -> list[PendingExtraction]:
        return await self._read(self.sync.pending_extractions, agent_id, limit)

    async def pending_count(self, agent_id: str | None = None) -> int:
        return await self._read(self.sync.pending_count, agent_id)

    # ----- management (events) --------------------------------------------------------------

    async def delete_fact(
        self, agent_id: str, fact_id: str, *, actor: str | None = None, via: str = "python"
    ) -> DeleteResult:
        return await self._command(self.sync.delete_fact, agent_id, fact_id, actor=actor, via=via)

    async def forget_agent(
        self, agent_id: str, *, actor: str | None = None, via: str = "python"
    ) -> ForgetResult:
        return await self._command(self.sync.forget_agent, agent_id, actor=actor, via=via)

    async def erase_agent(
        self, agent_id: str, *, actor: str | None = None, via: str = "python"
    ) -> EraseResult:
        return await self._command(self.sync.erase_agent, agent_id, actor=actor, via=via)

    async def reprocess(self, agent_id: str, message_id: str | None = None) -> ReprocessResult:
        return await self._command(self.sync.reprocess, agent_id, message_id)

    async def reprocess_pending(
        self, agent_id: str | None = None, message_id: str | None = None
    ) -> ReprocessReport:
        return await self._command(self.sync.reprocess_pending, agent_id, message_id)

    async def rebuild(
        self, projection: str | None = None, progress: bool = False, *, cell: str | None = None
    ) -> RebuildReport:
        return await self._command(self.sync.rebuild, projection, progress, cell=cell)

    # ----- direct edits (issue 24) ---------------------------------------------------------

    async def update_fact(
        self, agent_id: str, fact_id: str, text: str, *, actor: str | None = None,
        via: str = "python",
    ) -> UpdateResult:
        return await self._command(self.sync.update_fact, agent_id, fact_id, text, actor=actor,
                                   via=via)

    async def record_message(
        self,
        agent_id: str,
        text: str,
        *,
        speaker: str | None = None,
        session_id: str | None = None,
        occurred_at: datetime | None = None,
        message_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> WriteResult:
        return await self._command(
            self.sync.record_message, agent_id, text, speaker=speaker, session_id=session_id,
            occurred_at=occurred_at, message_id=message_id, metadata=metadata,
        )
