"""Rebuild without downtime (ADR-0027): while a projector elected in other sessions (ADR-0020:
what another ``serve`` process is to PostgreSQL) keeps following the log and writers keep
appending, a reader retrieves in a loop and never sees an error, an empty or a partial read
model; events appended during the rebuild are applied exactly once (the tables equal a quiet
rebuild's afterwards) and the live projector goes on without a failure.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from test_rebuild import drive, dump

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.projections import rebuild as rebuild_module
from engramdb.projections.embeddings import CountingEmbedder
from engramdb.projections.rebuild import rebuild
from engramdb.projections.runner import ProjectionSet
from engramdb.services.memory.event_log import EventLog
from engramdb.services.memory.facade import Memory


@pytest.fixture
def store(pg_url: str, fresh_schema: Any) -> Iterator[tuple[str, dict[str, str]]]:
    schema, env = fresh_schema("rbo")
    yield schema, env


class Reader(threading.Thread):
    """Retrieves and counts agent-a's facts in a loop; records errors and what it saw."""

    def __init__(self, memory: Memory, url: str, schema: str) -> None:
        super().__init__(daemon=True)
        self.memory, self.url, self.schema = memory, url, schema
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.counts: list[int] = []
        self.results: list[int] = []
        self.slowest = 0.0

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{self.schema}", public')
            while not self.stop.is_set():
                started = time.perf_counter()
                try:
                    row = conn.execute("SELECT count(*) FROM mem_facts WHERE agent_id = 'agent-a'"
                                       ).fetchone()
                    self.counts.append(int(row[0]) if row else -1)
                    result = self.memory.retrieve("agent-a", "what about Ana's tea fact 3?")
                    self.results.append(len(result.facts))
                except BaseException as exc:  # noqa: BLE001 - the test reports it
                    self.errors.append(exc)
                self.slowest = max(self.slowest, time.perf_counter() - started)


class Writer(threading.Thread):
    """Keeps appending agent-d's conversation until stopped (its own application)."""

    def __init__(self, env: dict[str, str]) -> None:
        super().__init__(daemon=True)
        self.app = EventLog(env)
        self.stop = threading.Event()
        self.position = 0
        self.errors: list[BaseException] = []

    def run(self) -> None:
        i = 0
        try:
            while not self.stop.is_set():
                self.position = drive(self.app, "agent-d", 1, start=i)
                i += 2 if i % 42 == 40 else 1  # drive() cannot reprocess a pending turn (41)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            self.errors.append(exc)
        finally:
            self.app.close()


def test_rebuild_while_projecting_writing_and_reading(
    pg_url: str, store: tuple[str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    schema, env = store
    app = EventLog(env)
    live = ProjectionSet.start(EventLog, env, HashEmbedder())  # the elected projector
    memory = Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True,
                         start_projectors=False)
    reader, writer = Reader(memory, pg_url, schema), Writer(env)
    try:
        live.wait(drive(app, "agent-a", 12), timeout=30)
        live.wait(drive(app, "agent-b", 4), timeout=30)
        before = dump(pg_url, schema)
        facts_a = sum(1 for r in before["mem_facts"] if r[0] == "agent-a")

        # events appended after the bulk fold, while the shadow is loaded: the catch-up must
        # apply them (the writer thread keeps appending through the swap as well)
        built = rebuild_module.finish_shadow
        late: list[int] = []

        def build_then_write(*args: Any, **kwargs: Any) -> Any:
            out = built(*args, **kwargs)
            late.append(drive(app, "agent-c", 2, start=len(late) * 2))
            return out

        monkeypatch.setattr(rebuild_module, "finish_shadow", build_then_write)
        reader.start()
        writer.start()
        time.sleep(0.3)
        report = rebuild(EventLog, env, CountingEmbedder(HashEmbedder()))
        time.sleep(0.3)
        writer.stop.set()
        writer.join(30)
        reader.stop.set()
        reader.join(30)
        assert not writer.errors and not reader.errors, (writer.errors, reader.errors[:3])
        # the reader never saw an empty or partial model: agent-a's facts were all there
        assert reader.counts and min(reader.counts) == facts_a == max(reader.counts)
        assert reader.results and min(reader.results) > 0
        assert report.catch_up_events > 0 and late
        live.wait(max(writer.position, late[-1]), timeout=60)
        assert all(s.failures == 0 and s.restarts == 0 for s in live.status().values()), \
            live.status()
        assert live.standby() == set()
        online = dump(pg_url, schema)
        # a second rebuild with nothing moving gives the same tables row for row: nothing was
        # lost or applied twice across the first one's catch-up and swap
        monkeypatch.setattr(rebuild_module, "finish_shadow", built)
        rebuild(EventLog, env, HashEmbedder())
        assert dump(pg_url, schema) == online
        with psycopg.connect(pg_url, autocommit=True) as conn:  # no shadow schema left behind
            left = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE "
                                "'engramdb_rebuild_%'").fetchall()
        assert left == []
    finally:
        writer.stop.set()
        reader.stop.set()
        memory.close()
        live.stop()
        app.close()


@pytest.mark.parametrize("supervise", [True, False])
def test_rebuild_beside_a_projector_still_catching_up(
    pg_url: str, store: tuple[str, dict[str, str]], supervise: bool
) -> None:
    """The shadow is never swapped in ahead of the projector that continues on it (which
    would then be refused its next position): the swap waits for a running projector —
    elected (lease) or not (its position moves) — to reach the shadow's position."""
    schema, env = store
    app = EventLog(env)
    try:
        pos = drive(app, "agent-a", 6)
        with ProjectionSet.start(EventLog, env, HashEmbedder(), supervise=supervise,
                                 max_batch_events=1) as live:
            report = rebuild(EventLog, env, HashEmbedder())
            assert report.position == pos
            pos = drive(app, "agent-a", 3, start=6)
            live.wait(pos, timeout=30)  # unsupervised, a refused position would raise here
            assert all(s.failures == 0 and s.restarts == 0 for s in live.status().values())
        online = dump(pg_url, schema)
        rebuild(EventLog, env, HashEmbedder())
        assert dump(pg_url, schema) == online
    finally:
        app.close()
