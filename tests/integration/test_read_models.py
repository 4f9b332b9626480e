"""``READ_MODELS`` is the only registry: schema setup, the projectors and rebuild all follow it.

Proved three ways: every registered read model's tables exist after the projectors start and
after a rebuild (``patterns`` included, empty); a read model added by one module-like
definition and one registry entry is created, projected and rebuilt identically with no other
edit (the recipe of docs/read-models.md); and the one column list of ``mem_facts`` matches the
reference model's ``FactRow``.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import psycopg
import pytest

from engramdb.domain.aggregate import AgentMemory, MessageRecord
from engramdb.domain.fold import FactRow
from engramdb.domain.payloads import FactPayload
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.projections import read_models
from engramdb.projections.handlers import handles
from engramdb.projections.read_model import BulkFold, ReadModel, ReadModelView
from engramdb.projections.read_models import PROJECTION_NAMES, READ_MODELS
from engramdb.projections.read_models.memory.tables import FACTS
from engramdb.projections.read_models.patterns import matching_patterns
from engramdb.projections.rebuild import rebuild
from engramdb.projections.runner import ProjectionSet, tracking_positions
from engramdb.projections.tables import Table
from engramdb.services.memory.event_log import EventLog

T0 = datetime(2024, 6, 1, 9, 0, tzinfo=UTC)
BY = {"extractor": "test"}


def story(app: EventLog, agent: str) -> int:
    mem = app.agent_memory(agent)
    rec = MessageRecord(agent_id=agent, message_id="m1", session_id=None, speaker="Ana",
                        text="Ana likes tea, Bo too", occurred_at=T0, metadata={})
    mem.register_entity("person:ana", "Ana", "person", "m1", BY)
    mem.register_entity("person:bo", "Bo", "person", "m1", BY)
    mem.add_fact(FactPayload(
        fact_id="f1", entity_key="person:ana", linked_entities=["person:bo"], attribute_key=None,
        text="Ana likes tea", category="general", confidence=0.9, importance=0.5,
        source_message_id="m1", source_message_ids=["m1"], speaker="Ana", valid_from=T0,
        decided_by=BY,
    ))
    return int(app.save(mem, rec)[-1].notification.id)


def tables_in(url: str, schema: str) -> set[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
    return {r[0] for r in rows}


def count(url: str, schema: str, table: str) -> int:
    with psycopg.connect(url) as conn:
        conn.execute(f'SET search_path TO "{schema}", public')
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


def test_fact_columns_are_the_reference_rows_fields() -> None:
    assert set(FACTS.row_columns) == {f.name for f in fields(FactRow)}


def test_registry_drives_schema_setup_projection_and_rebuild(
    pg_url: str, fresh_schema: Any
) -> None:
    schema, env = fresh_schema("rm")
    app = EventLog(env)
    try:
        with ProjectionSet.start(EventLog, env, HashEmbedder()) as ps:
            assert set(ps.runners) == set(PROJECTION_NAMES) == {"conversation", "memory"}
            ps.wait(story(app, "agent-r"), timeout=30)
        present = tables_in(pg_url, schema)
        for rm in READ_MODELS:
            assert set(rm.table_names) <= present, rm.name
            assert (f"{rm.name}_tracking" in present) == rm.projected, rm.name
        assert count(pg_url, schema, "mem_patterns") == 0

        report = rebuild(EventLog, env, HashEmbedder())
        assert report.projections == [rm.name for rm in READ_MODELS]
        assert set(report.rows) == {t for rm in READ_MODELS for t in rm.table_names}
        assert report.rows["mem_patterns"] == 0 and report.rows["mem_facts"] == 1
        assert set(tables_in(pg_url, schema)) == present
        assert count(pg_url, schema, "mem_patterns") == 0
        with psycopg.connect(pg_url) as conn:
            conn.execute(f'SET search_path TO "{schema}", public')
            assert matching_patterns(conn, "agent-r", ["f1"], ["%tea%"], 5, None) == []
    finally:
        app.close()


# ----- a read model added the way the recipe says: one module, one registry line ---------

NAMES = Table(
    "test_entity_names",
    columns=(("aggregate_id", "uuid NOT NULL"), ("entity_key", "text NOT NULL"),
             ("display_name", "text NOT NULL")),
    primary_key=("aggregate_id", "entity_key"),
)


class EntityNamesView(ReadModelView):
    projection_name = "entity_names"
    tables = (NAMES,)

    @handles(AgentMemory.EntityRegistered)
    def _registered(self, curs: Any, e: AgentMemory.EntityRegistered) -> None:
        curs.execute(
            "INSERT INTO test_entity_names VALUES (%s, %s, %s)",
            (e.originator_id, e.entity_key, e.display_name),
        )


class EntityNamesFold(BulkFold):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[tuple[UUID, str, str]] = []

    @handles(AgentMemory.EntityRegistered)
    def _registered(self, e: AgentMemory.EntityRegistered) -> None:
        self.names.append((e.originator_id, e.entity_key, e.display_name))

    def rows(self, table: str) -> list[tuple[Any, ...]]:
        return list(self.names)


def test_a_new_read_model_is_one_definition_and_one_registry_entry(
    pg_url: str, fresh_schema: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    added = ReadModel(EntityNamesView, EntityNamesFold)
    monkeypatch.setattr(read_models, "READ_MODELS", (*READ_MODELS, added))
    monkeypatch.setattr(read_models, "BY_NAME", {**read_models.BY_NAME, added.name: added})
    schema, env = fresh_schema("rm")
    app = EventLog(env)

    def names() -> list[tuple[Any, ...]]:
        with psycopg.connect(pg_url) as conn:
            conn.execute(f'SET search_path TO "{schema}", public')
            return conn.execute("SELECT * FROM test_entity_names ORDER BY 2").fetchall()

    try:
        with ProjectionSet.start(EventLog, env, HashEmbedder()) as ps:
            assert "entity_names" in ps.runners
            position = story(app, "agent-n")
            ps.wait(position, timeout=30)
        projected = names()
        assert [r[1:] for r in projected] == [("person:ana", "Ana"), ("person:bo", "Bo")]
        assert tracking_positions(pg_url, schema, ["entity_names"]) == {"entity_names": position}

        report = rebuild(EventLog, env, HashEmbedder(), "entity_names")
        assert report.rows == {"test_entity_names": 2}
        assert names() == projected
        assert tracking_positions(pg_url, schema, ["entity_names"]) == {"entity_names": position}
    finally:
        app.close()


def test_schema_setup_drops_a_retired_index(fresh_schema: Any, pg_url: str) -> None:
    """A database made before ``mem_messages_session_order`` replaced ``mem_messages_session``
    (ADR-0047) loses the old index at the next schema setup (``Table.retired_indexes``) and
    keeps the new one: its writes maintain only the indexes the table declares."""
    from engramdb.services.memory.facade import Memory

    schema, env = fresh_schema("retire")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True):
        pass
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE INDEX mem_messages_session ON "{schema}".mem_messages (agent_id, session_id)')
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True):
        pass
    with psycopg.connect(pg_url, autocommit=True) as conn:
        names = {r[0] for r in conn.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = %s AND tablename = 'mem_messages'",
            (schema,)).fetchall()}
    assert "mem_messages_session" not in names and "mem_messages_session_order" in names, names


def test_vectors_stay_in_the_row(fresh_schema: Any, pg_url: str) -> None:
    """``VECTOR_STORAGE``: a turn with a paragraph of text keeps its embedding in the row (its
    text goes to TOAST instead), so a distance computed from the row reads no TOAST pages; a
    table made before (pgvector's EXTERNAL) is set to MAIN at the next schema setup."""
    import random
    import string

    from engramdb.services.memory.facade import Memory

    schema, env = fresh_schema("vstore")
    words = " ".join("".join(random.choices(string.ascii_lowercase, k=7)) for _ in range(150))
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as memory:
        memory.write("vs-agent", "I live in Recife. " + words, speaker="Ana")
        memory.wait_for_projections()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}", public')
        storage = dict(conn.execute(
            "SELECT c.relname, a.attstorage FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "WHERE c.relnamespace = %s::regnamespace AND a.attname = 'embedding' "
            "AND c.relname IN ('mem_messages', 'mem_facts')", (schema,)).fetchall())
        assert storage == {"mem_messages": "m", "mem_facts": "m"}, storage
        row = conn.execute("SELECT pg_column_toast_chunk_id(embedding), pg_column_size(embedding),"
                           " pg_column_toast_chunk_id(text) FROM mem_messages").fetchone()
        assert row is not None and row[0] is None and row[1] >= 384 * 4, row  # the vector: in the row
        assert row[2] is not None  # the ~1.2 KB of text moved out instead
        conn.execute("ALTER TABLE mem_messages ALTER COLUMN embedding SET STORAGE EXTERNAL")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True):
        pass
    with psycopg.connect(pg_url, autocommit=True) as conn:
        again = conn.execute(
            "SELECT a.attstorage FROM pg_attribute a WHERE a.attrelid = %s::regclass AND a.attname = 'embedding'",
            (f'"{schema}".mem_messages',)).fetchone()
    assert again == ("m",)
