"""Cells (ADR-0028): agents hashed over two schemas of the one test PostgreSQL.

Every surface is driven the way users drive it — NATS ingest through the server's own wiring,
``Memory.retrieve`` / ``history`` / ``facts_as_of`` / ``list_agents`` / ``rebuild`` /
``erase_agent`` / jobs — and then the two schemas are queried directly: an agent's events,
keys and read-model rows are in its cell's schema and nowhere else. Real PostgreSQL and NATS;
the offline extractor and the hashing embedder (honest, deterministic) are the only doubles.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import httpx
import psycopg
import pytest
from mcp import Client as McpClient
from psycopg import sql

from engramdb.domain.keys import agent_aggregate_id
from engramdb.infra.cells import CellsConfigError, CellSpec, cell_index, parse_cells
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.infra.settings import Settings
from engramdb.services.entrypoints.http.api import create_app
from engramdb.services.entrypoints.mcp.server import build_server
from engramdb.services.entrypoints.nats.ingest import IngestThread, build_ingest_app
from engramdb.services.entrypoints.nats.publisher import MessagePublisher
from engramdb.services.entrypoints.nats.retrieve import create_retrieve_broker, request_retrieve
from engramdb.services.entrypoints.serve.server import ingest_scaling
from engramdb.services.jobs import JobContext, select
from engramdb.services.jobs.runner import run_pass
from engramdb.services.memory.facade import Memory
from engramdb.services.retrieve.models import RetrieveRequest
from engramdb.services.write.messages import ConversationMessage
from engramdb.services.write.pipeline import WriteResult

READ_MODEL_TABLES = ("mem_facts", "mem_messages", "mem_entities", "mem_agents")


# ----- the format and the hash (no servers) ------------------------------------------------


def test_cells_setting_formats() -> None:
    assert parse_cells(None, "public") == [CellSpec("public", "public")]
    assert parse_cells("1", "mem") == [CellSpec("mem", "mem")]  # one cell: the schema as before
    assert parse_cells("3") == [CellSpec(f"cell{i}", f"engramdb_cell{i}") for i in range(3)]
    assert [c.schema for c in parse_cells("2", "mem")] == ["mem_cell0", "mem_cell1"]
    assert parse_cells('["a", "postgresql://u:p@db2/m", {"name": "x", "schema": "b"}]', "mem") == [
        CellSpec("a", "a"), CellSpec("cell1", "mem", "postgresql://u:p@db2/m"), CellSpec("x", "b"),
    ]
    for bad in ("0", "two", "[]", '["a", "a"]', '[{"schema": "no-dash"}]', '[{"host": "x"}]'):
        with pytest.raises(CellsConfigError, match="ENGRAMDB_CELLS"):
            parse_cells(bad)


def test_agent_hash_is_stable_and_spreads() -> None:
    # pinned: the same agent lands in the same cell in every process, machine and version
    assert [cell_index(f"agent-{i}", 4) for i in range(8)] == [2, 2, 0, 1, 0, 2, 3, 0]
    assert cell_index("anything", 1) == 0
    counts = [0, 0]
    for i in range(2000):
        counts[cell_index(f"user-{i}", 2)] += 1
    assert min(counts) > 900  # uniform enough: no cell gets most agents


# ----- two cells in one PostgreSQL -----------------------------------------------------------


@pytest.fixture
def two_cells(pg_url: str) -> Iterator[tuple[Memory, list[str]]]:
    base = f"cells_{uuid.uuid4().hex[:10]}"
    settings = Settings(cells="2", db_schema=base)
    memory = Memory.open(settings, database_url=pg_url, embedder=HashEmbedder(384), llm=None,
                         quiet=True)
    schemas = [f"{base}_cell0", f"{base}_cell1"]
    try:
        assert [c.schema for c in memory.cells] == schemas
        yield memory, schemas
    finally:
        memory.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _agents_per_cell(count: int) -> list[list[str]]:
    """``count`` fresh agent ids in each of the two cells."""
    found: list[list[str]] = [[], []]
    while min(len(f) for f in found) < count:
        agent = f"cell-agent-{uuid.uuid4().hex[:12]}"
        if len(found[cell_index(agent, 2)]) < count:
            found[cell_index(agent, 2)].append(agent)
    return found


def _where(pg_url: str, schemas: list[str], agent: str) -> dict[str, list[str]]:
    """Per table, the schemas holding any row of ``agent`` (events by aggregate id)."""
    out: dict[str, list[str]] = {}
    with psycopg.connect(pg_url) as conn:
        for table in READ_MODEL_TABLES:
            out[table] = [s for s in schemas if conn.execute(
                sql.SQL("SELECT count(*) FROM {} WHERE agent_id = %s").format(sql.Identifier(s, table)),
                (agent,)).fetchone()[0]]
        out["events"] = [s for s in schemas if conn.execute(
            sql.SQL("SELECT count(*) FROM {} WHERE originator_id = %s").format(
                sql.Identifier(s, "engramdb_events")), (agent_aggregate_id(agent),)).fetchone()[0]]
    return out


def _publish(nats_url: str, prefix: str, messages: list[ConversationMessage]) -> None:
    async def go() -> None:
        async with MessagePublisher(nats_url, prefix) as publisher:
            for message in messages:
                await publisher.publish(message)

    asyncio.run(go())


async def _retrieve_surfaces(memory: Memory, nats_url: str, cities: dict[str, str]) -> None:
    subject = f"engramdb.retrieve.cells{uuid.uuid4().hex[:8]}"
    broker = create_retrieve_broker(memory, nats_url, subject=subject)
    await broker.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(memory)),
                                     base_url="http://t") as http, \
                McpClient(build_server(memory=memory)) as mcp:
            for agent, city in cities.items():
                query = f"Where does Ana live? {city}"
                r = await http.post("/v1/retrieve", json={"agent_id": agent, "query": query})
                assert r.status_code == 200 and city in r.json()["facts"][0]["fact_text"]
                reply = await request_retrieve(broker, RetrieveRequest(agent_id=agent, query=query),
                                               subject=subject)
                assert reply.result is not None and city in reply.result.facts[0].fact_text
                found = await mcp.call_tool("retrieve", {"agent_id": agent, "query": query})
                assert not found.is_error and city in json.dumps(found.structured_content)
            assert (await http.get("/readyz")).status_code == 200
    finally:
        await broker.stop()


def test_two_cells_every_surface_lands_in_the_agents_cell(
    two_cells: tuple[Memory, list[str]], pg_url: str, nats_url: str
) -> None:
    memory, schemas = two_cells
    cell0, cell1 = _agents_per_cell(2)
    agents = cell0 + cell1
    home = {a: schemas[cell_index(a, 2)] for a in agents}

    # both cells' projectors run here: their leases are distinct (the key names the schema)
    health = memory.health()
    assert health.ok, health.reasons
    assert {name for name, p in health.projections.items() if p.running} >= {
        "cell0/memory", "cell1/memory", "cell0/conversation", "cell1/conversation"}

    # ingest over NATS, with the server's own wiring: each agent's turns into its cell
    prefix = f"t{uuid.uuid4().hex[:10]}"
    results: list[WriteResult] = []
    lock = threading.Lock()

    def collect(result: WriteResult) -> None:
        with lock:
            results.append(result)

    app, _broker = build_ingest_app(
        nats_url, memory.ingest_pipeline(), prefix=prefix, on_result=collect,
        **ingest_scaling(memory, Settings(ingest_partitions=2)),
    )
    cities = ["Recife", "Lisbon", "Porto", "Quito"]
    messages = [
        ConversationMessage(agent_id=agent, message_id=f"m{k}", speaker="Ana", text=text)
        for agent, city in zip(agents, cities, strict=True)
        for k, text in enumerate((f"I live in {city}.", "I love jazz."))
    ]
    with IngestThread(app):
        _publish(nats_url, prefix, messages)
        deadline = datetime.now(UTC).timestamp() + 60
        while len(results) < len(messages) and datetime.now(UTC).timestamp() < deadline:
            threading.Event().wait(0.05)
    assert len(results) == len(messages)
    for agent in agents:
        memory.wait_for_projections(max(r.position for r in results if r.agent_id == agent),
                                    agent_id=agent)

    # a direct write too, and retrieve: each agent sees its own facts (and only its own)
    for agent, city in zip(agents, cities, strict=True):
        written = memory.write(agent, "I work at Acme.", speaker="Ana")
        found = memory.retrieve(agent, f"Where does Ana live? {city}", wait_for=written.position)
        assert found.facts and found.facts[0].fact_text.startswith(f"Ana lives in {city}")
        assert all(city in f.fact_text or "Acme" in f.fact_text or "jazz" in f.fact_text
                   for f in found.facts)
        assert {e.message_id for e in memory.history(agent)} >= {"m0", "m1", written.message_id}
        assert any(city in f.text for f in memory.facts_as_of(agent, datetime.now(UTC)))
        assert _where(pg_url, schemas, agent) == {t: [home[agent]] for t in (*READ_MODEL_TABLES, "events")}

    # the other retrieve surfaces route the same way (HTTP, NATS request/reply, MCP)
    asyncio.run(_retrieve_surfaces(memory, nats_url, dict(zip(agents, cities, strict=True))))

    # the admin view spans cells, in agent order, page by page
    seen: list[str] = []
    cursor = None
    while True:
        page = memory.list_agents(limit=3, cursor=cursor)
        seen += [a.agent_id for a in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(agents) == [a for a in seen if a in agents] and seen == sorted(seen)

    # jobs run per cell on the cell's store (their runs recorded in that cell)
    runs = run_pass(JobContext(memory), select(["vitality"]), agents)
    assert sorted(r.agent_id for r in runs) == sorted(agents)
    with psycopg.connect(pg_url) as conn:
        for agent in agents:
            rows = [s for s in schemas if conn.execute(sql.SQL(
                "SELECT count(*) FROM {} WHERE agent_id = %s").format(
                    sql.Identifier(s, "mem_job_runs")), (agent,)).fetchone()[0]]
            assert rows == [home[agent]]

    # rebuild: every cell from its own log; the same facts, still in the same schemas
    before = {a: sorted(f.fact_id for f in memory.list_facts(a).items) for a in agents}
    report = memory.rebuild()
    assert report.events >= len(messages)
    one = memory.rebuild(cell="cell1")
    assert 0 < one.events < report.events
    with pytest.raises(ValueError, match="no cell named"):
        memory.rebuild(cell="cell9")
    for agent in agents:
        assert sorted(f.fact_id for f in memory.list_facts(agent).items) == before[agent]
        assert _where(pg_url, schemas, agent) == {t: [home[agent]] for t in (*READ_MODEL_TABLES, "events")}

    # erase: the agent's key and rows go from its cell; the other cell is untouched
    gone = cell1[0]
    other_rows = {a: _where(pg_url, schemas, a) for a in agents if a != gone}
    memory.erase_agent(gone, actor="test")
    assert _where(pg_url, schemas, gone)["mem_facts"] == []
    assert _where(pg_url, schemas, gone)["events"] == [home[gone]]  # kept, unreadable
    with psycopg.connect(pg_url) as conn:
        erased = [s for s in schemas if conn.execute(sql.SQL(
            "SELECT count(*) FROM {} WHERE erased_at IS NOT NULL").format(
                sql.Identifier(s, "engramdb_data_keys"))).fetchone()[0]]
    assert erased == [home[gone]]
    assert {a: _where(pg_url, schemas, a) for a in other_rows} == other_rows

    # a single store's attributes name no cell here: the error says what to use
    with pytest.raises(AttributeError, match=r"memory.cell\(agent_id\).pool"):
        _ = memory.pool
    with pytest.raises(ValueError, match="positions are per cell"):
        memory.wait_for_projections(1)


def test_one_cell_is_the_store_as_before(fresh_schema: object, pg_url: str) -> None:
    """``ENGRAMDB_CELLS`` unset or ``1``: the configured schema itself, its tables and events
    where they always were, and the single-store attributes (``memory.app``...) still work."""
    schema, _env = fresh_schema("onecell")  # type: ignore[operator]
    for cells in (None, "1"):
        with Memory.open(Settings(cells=cells, db_schema=schema), database_url=pg_url,
                         embedder=HashEmbedder(384), llm=None, quiet=True,
                         start_projectors=False) as memory:
            assert [c.schema for c in memory.cells] == [schema] and memory.schema == schema
            assert memory.app is memory.cells[0].app and memory.pipeline is memory.ingest_pipeline()
            memory.write("solo", "I live in Natal.", speaker="Ana")
    with psycopg.connect(pg_url) as conn:
        count = conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE originator_id = %s").format(
            sql.Identifier(schema, "engramdb_events")), (agent_aggregate_id("solo"),)).fetchone()[0]
        others = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE %s",
                              (f"{schema}_cell%",)).fetchone()[0]
    assert count > 0 and others == 0
