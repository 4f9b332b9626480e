"""``AsyncMemory`` (issue 24, ADR-0047): it never blocks the event loop, and a cancelled write
is recorded fully or not at all. The behavioural tests of the sync facade run on it too
(``test_memory_facade.py`` and ``test_manage.py`` are parametrised over both APIs).

Real PostgreSQL and projectors; the doubles are the hashing embedder and, for the
cancellation test, an extractor that waits on an event so the write is caught mid-flight.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import warnings
from typing import Any

import pytest

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.extraction import RuleBasedExtractor
from engramdb.services.memory.async_facade import AsyncMemory
from engramdb.services.memory.facade import Memory


class _HeldExtractor:
    """The offline extractor, held at its start until the test lets it go."""

    def __init__(self) -> None:
        self.inner = RuleBasedExtractor()
        self.info = self.inner.info
        self.entered = threading.Event()
        self.release = threading.Event()

    def extract(self, request: Any) -> Any:
        self.entered.set()
        assert self.release.wait(30), "the test never released the extractor"
        return self.inner.extract(request)


def test_every_public_method_of_memory_has_an_async_twin_with_its_signature() -> None:
    """Same names, same arguments: code moves from ``Memory`` to ``AsyncMemory`` by adding await."""
    twins = [name for name, fn in vars(AsyncMemory).items()
             if inspect.iscoroutinefunction(fn) and not name.startswith("_")]
    assert len(twins) >= 20
    for name in twins:
        if name in ("open", "close"):
            continue
        sync = inspect.signature(getattr(Memory, name))
        asynchronous = inspect.signature(getattr(AsyncMemory, name))
        assert list(asynchronous.parameters) == list(sync.parameters), name
        for param in sync.parameters.values():
            assert asynchronous.parameters[param.name].default == param.default, (name, param.name)
            assert asynchronous.parameters[param.name].kind == param.kind, (name, param.name)


def test_no_callback_blocks_the_loop_in_asyncio_debug_mode(fresh_schema: Any, agent_id: str) -> None:
    """asyncio debug mode logs every callback slower than ``slow_callback_duration`` (50 ms):
    open, concurrent writes and retrieves, management reads, history and close must log none."""
    _schema, env = fresh_schema("async")
    slow: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            slow.append(record.getMessage())

    handler = Catch(level=logging.WARNING)
    logging.getLogger("asyncio").addHandler(handler)

    async def main() -> None:
        asyncio.get_running_loop().slow_callback_duration = 0.05
        memory = await AsyncMemory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True)
        async with memory:
            texts = ["I live in Recife.", "My sister Carla works at Acme.", "I love jazz.",
                     "Carla lives in Porto.", "I play the piano on Sundays."]
            written = await asyncio.gather(*(
                memory.write(agent_id, text, speaker="Ana", session_id=f"s{i % 2}")
                for i, text in enumerate(texts)))
            await memory.wait_for_projections(max(w.position for w in written))
            results = await asyncio.gather(*(
                memory.retrieve(agent_id, q) for q in ["Where does Ana live?", "Carla", "music"] * 4))
            assert "Recife" in results[0].context  # as a fact or a turn: the writes raced
            facts = await memory.list_facts(agent_id, session="s0")
            assert facts.items and all(f.source_message_ids for f in facts.items)
            assert (await memory.history(agent_id, facts.items[0].fact_id))[0].decision == "ADD"
            assert (await memory.list_messages(agent_id)).items
            assert (await memory.health()).database.status == "up"

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            asyncio.run(main(), debug=True)
        finally:
            logging.getLogger("asyncio").removeHandler(handler)
    ours = [str(w.message) for w in caught if "engramdb" in (w.filename or "")]
    assert not slow, slow
    assert not ours, ours


@pytest.fixture
def held(fresh_schema: Any) -> Any:
    _schema, env = fresh_schema("async_cancel")
    extractor = _HeldExtractor()
    memory = Memory.open(env=env, embedder=HashEmbedder(384), llm=None, extractor=extractor,
                         quiet=True)
    yield memory, extractor
    extractor.release.set()
    memory.close()


def test_a_write_cancelled_mid_flight_is_recorded_fully(held: Any, agent_id: str) -> None:
    memory, extractor = held

    async def main() -> None:
        facade = AsyncMemory(memory, owns_memory=False)
        task = asyncio.create_task(facade.write(agent_id, "I live in Recife.", speaker="Ana",
                                                message_id="m-1"))
        assert await asyncio.to_thread(extractor.entered.wait, 30)  # stage 1 done, deciding
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done(), "a started write must finish before the cancel is reported"
        extractor.release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        await facade.close()

    asyncio.run(main())
    memory.wait_for_projections()
    messages = memory.list_messages(agent_id).items
    assert [(m.message_id, m.processed) for m in messages] == [("m-1", True)]
    assert [e.decision for e in memory.history(agent_id) if e.decision == "ADD"] == ["ADD"]


def test_a_write_cancelled_before_it_started_records_nothing(held: Any, agent_id: str) -> None:
    memory, extractor = held

    async def main() -> None:
        facade = AsyncMemory(memory, max_threads=1, owns_memory=False)
        first = asyncio.create_task(facade.write(agent_id, "I love jazz.", speaker="Ana",
                                                 message_id="m-1"))
        assert await asyncio.to_thread(extractor.entered.wait, 30)  # the one thread is busy
        queued = asyncio.create_task(facade.write(agent_id, "I live in Recife.", speaker="Ana",
                                                  message_id="m-2"))
        await asyncio.sleep(0.05)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        extractor.release.set()
        assert (await first).position
        await facade.close()

    asyncio.run(main())
    memory.wait_for_projections()
    assert [m.message_id for m in memory.list_messages(agent_id).items] == ["m-1"]


def test_the_debug_mode_detector_does_catch_a_blocking_call() -> None:
    """The control for the test above: the same handler sees a 100 ms blocking callback."""
    import time

    slow: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            slow.append(record.getMessage())

    handler = Catch(level=logging.WARNING)
    logging.getLogger("asyncio").addHandler(handler)

    async def main() -> None:
        asyncio.get_running_loop().slow_callback_duration = 0.05
        time.sleep(0.1)  # what a sync Memory call on the loop would do

    try:
        asyncio.run(main(), debug=True)
    finally:
        logging.getLogger("asyncio").removeHandler(handler)
    assert any("took" in line for line in slow), slow
