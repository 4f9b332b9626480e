"""A fact keeps a copy of its source turns' scope (session and metadata, ``source_scope``),
so facts can be filtered by their turns without joining ``mem_messages`` (ADR-0047).

The memory projector keeps the turns' scopes itself (``mem_turn_scopes``): projectors advance
independently. Checked through the live projector (a turn recorded before or after the fact
that cites it, a confirmation adding a turn), against the bulk rebuild, on a database made
before the column (schema setup fills it), and through erasure.
Real PostgreSQL and projectors; the hashing embedder; events appended like ``test_rebuild``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from engramdb.domain.aggregate import MessageRecord
from engramdb.domain.payloads import FactPayload
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.projections.rebuild import rebuild
from engramdb.projections.runner import ProjectionSet
from engramdb.services.memory.event_log import EventLog

T0 = datetime(2024, 7, 1, 9, 0, tzinfo=UTC)
BY = {"extractor": "test"}
AGENT = "scope-agent"
TURNS = {  # message id -> (session, metadata)
    "m1": ("s1", {"topic": "tea", "n": 1}),
    "m2": (None, {"k": "v", "tags": ["a", "b"]}),
    "m3": ("s2", {}),
    "m4": ("s1", {"late": True}),
}
SCOPE = {m: {"s": s, "m": meta} for m, (s, meta) in TURNS.items()}


def turn(agent: str, mid: str, i: int) -> MessageRecord:
    session, metadata = TURNS[mid]
    return MessageRecord(agent_id=agent, message_id=mid, session_id=session, speaker="Ana",
                         text=f"turn {mid}", occurred_at=T0 + timedelta(minutes=i),
                         metadata=metadata)


def fact(fid: str, text: str, sources: list[str]) -> FactPayload:
    return FactPayload(
        fact_id=fid, entity_key="person:ana", linked_entities=[], attribute_key=None, text=text,
        category="general", confidence=0.8, importance=0.5, source_message_id=sources[0],
        source_message_ids=sources, speaker="Ana", valid_from=T0, decided_by=BY,
    )


def story(app: EventLog, agent: str) -> int:
    """Turns m1-m3 first; f1 cites m2, m1 and an unknown turn; f2 cites m4 before m4 is
    recorded; f1 is confirmed by m3, then updated by f3 (citing m1)."""
    for i, mid in enumerate(["m1", "m2", "m3"]):
        app.save(turn(agent, mid, i))
    mem = app.agent_memory(agent)
    mem.register_entity("person:ana", "Ana", "person", "m1", BY)
    mem.add_fact(fact("f1", "Ana likes tea", ["m2", "m1", "nowhere"]))
    mem.add_fact(fact("f2", "Ana lives in Porto", ["m4"]))
    app.save(mem)
    app.save(turn(agent, "m4", 4))  # recorded after the fact that cites it
    mem = app.agent_memory(agent)
    mem.confirm_fact("f1", "m3", T0 + timedelta(minutes=5))
    mem.confirm_fact("f1", "m3", T0 + timedelta(minutes=6))  # a source already: once
    app.save(mem)
    mem = app.agent_memory(agent)
    mem.update_fact("f2", fact("f3", "Ana lives in Lisbon", ["m1"]))
    return int(app.save(mem)[-1].notification.id)


EXPECTED = {
    "f1": [SCOPE["m2"], SCOPE["m1"], SCOPE["m3"]],
    "f2": [SCOPE["m4"]],
    "f3": [SCOPE["m1"]],
}


def scopes(url: str, schema: str) -> dict[str, list[dict[str, Any]]]:
    with psycopg.connect(url) as conn:
        conn.execute(f'SET search_path TO "{schema}", public')
        rows = conn.execute("SELECT fact_id, source_scope FROM mem_facts WHERE agent_id = %s",
                            (AGENT,)).fetchall()
    return {fid: scope for fid, scope in rows}


def turn_rows(url: str, schema: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        conn.execute(f'SET search_path TO "{schema}", public')
        return conn.execute("SELECT * FROM mem_turn_scopes ORDER BY 1, 2").fetchall()


def keyed_facts(url: str, schema: str, keys: list[str]) -> list[str]:
    """The facts holding one of ``keys``, found by the keys' index (the plan is checked)."""
    from engramdb.projections.scope_keys import scope_keys_sql

    statement = f"SELECT f.fact_id FROM mem_facts f WHERE {scope_keys_sql('f')} && %s::text[] ORDER BY 1"
    with psycopg.connect(url) as conn:
        conn.execute(f'SET search_path TO "{schema}", public')
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + statement, (keys,)).fetchall())
        assert "mem_facts_scope_keys" in plan, plan
        return [r[0] for r in conn.execute(statement, (keys,)).fetchall()]


def test_facts_carry_their_turns_scope_live_and_rebuilt(pg_url: str, fresh_schema: Any) -> None:
    schema, env = fresh_schema("scope")
    app = EventLog(env)
    try:
        with ProjectionSet.start(EventLog, env, HashEmbedder()) as ps:
            ps.wait(story(app, AGENT), timeout=30)
        live = scopes(pg_url, schema)
        assert live == EXPECTED
        turns = turn_rows(pg_url, schema)
        assert [(a, m, s) for a, m, s in turns] == [(AGENT, m, SCOPE[m]) for m in sorted(TURNS)]
        # what the index is for: facts of a session / a metadata value, by containment
        with psycopg.connect(pg_url) as conn:
            conn.execute(f'SET search_path TO "{schema}", public')
            found = conn.execute(
                "SELECT fact_id FROM mem_facts WHERE source_scope @> %s ORDER BY 1",
                (Jsonb([{"s": "s1"}]),)).fetchall()
            assert [r[0] for r in found] == ["f1", "f2", "f3"]
            found = conn.execute(
                "SELECT fact_id FROM mem_facts WHERE source_scope @> %s ORDER BY 1",
                (Jsonb([{"m": {"tags": ["b"]}}]),)).fetchall()
            assert [r[0] for r in found] == ["f1"]

        assert keyed_facts(pg_url, schema, ["s:s1"]) == ["f1", "f2", "f3"]
        rebuild(EventLog, env, HashEmbedder())
        assert scopes(pg_url, schema) == live
        assert turn_rows(pg_url, schema) == turns
        # the rebuilt table's keys are indexed too (built in the shadow, moved with the table)
        assert keyed_facts(pg_url, schema, ["s:s1"]) == ["f1", "f2", "f3"]
    finally:
        app.close()


def test_schema_setup_fills_the_scopes_of_an_older_database(
    pg_url: str, fresh_schema: Any
) -> None:
    """A database made before ``source_scope``: the column, its index and the turn table are
    added by the next schema setup, and filled from ``mem_messages``."""
    schema, env = fresh_schema("scope_old")
    app = EventLog(env)
    try:
        with ProjectionSet.start(EventLog, env, HashEmbedder()) as ps:
            ps.wait(story(app, AGENT), timeout=30)
        assert scopes(pg_url, schema) == EXPECTED
        turns = turn_rows(pg_url, schema)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{schema}", public')
            conn.execute("DROP INDEX mem_facts_scope")
            # with the index of its exact keys (``mem_facts_scope_keys``, later still)
            conn.execute("ALTER TABLE mem_facts DROP COLUMN source_scope CASCADE")
            conn.execute("DROP TABLE mem_turn_scopes")
        with ProjectionSet.start(EventLog, env, HashEmbedder()) as ps:
            ps.wait(app.recorder.max_notification_id() or 0, timeout=30)
        assert scopes(pg_url, schema) == EXPECTED
        assert turn_rows(pg_url, schema) == turns
        with psycopg.connect(pg_url) as conn:
            conn.execute(f'SET search_path TO "{schema}", public')
            index = conn.execute("SELECT to_regclass('mem_facts_scope')::text").fetchone()
        assert index == ("mem_facts_scope",)
        # a later setup finds nothing to do and changes nothing
        with ProjectionSet.start(EventLog, env, HashEmbedder()):
            pass
        assert scopes(pg_url, schema) == EXPECTED
    finally:
        app.close()


def test_erasing_an_agent_drops_its_turn_scopes(fresh_schema: Any) -> None:
    from engramdb.services.memory.facade import Memory

    schema_env = fresh_schema("scope_erase")
    with Memory.open(env=schema_env.env, embedder=HashEmbedder(384), llm=None,
                     quiet=True) as memory:
        memory.write("gone", "I like tea.", speaker="Ana", session_id="s", metadata={"x": 1})
        memory.write("kept", "I like coffee.", speaker="Bo", session_id="t", metadata={"y": 2})
        memory.wait_for_projections()
        url = memory.database.url

        def agents() -> list[str]:
            with psycopg.connect(url) as conn:
                conn.execute(f'SET search_path TO "{memory.schema}", public')
                rows = conn.execute("SELECT agent_id, scope FROM mem_turn_scopes").fetchall()
            return sorted(f"{a}:{s['s']}" for a, s in rows)

        assert agents() == ["gone:s", "kept:t"]
        result = memory.erase_agent("gone")
        memory.wait_for_projections(result.position)
        assert agents() == ["kept:t"]


def test_the_backfill_skips_a_database_without_messages(pg_url: str, fresh_schema: Any) -> None:
    """The memory model's setup alone (no ``mem_messages`` yet), facts with sources and no
    scope: nothing to copy from, and the setup does not fail."""
    from engramdb.projections.read_models import BY_NAME

    schema, _env = fresh_schema("scope_fresh")
    ddl = BY_NAME["memory"].ddl(8, vector_indexes=False)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}", public')
        for statement in ddl:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO mem_facts (agent_id, fact_id, entity_key, fact_text, confidence, "
            "valid_from, recorded_at, source_message_ids) "
            "VALUES ('a', 'f', 'person:ana', 'x', 0.5, now(), now(), ARRAY['m1'])")
        for statement in ddl:
            conn.execute(statement)
        row = conn.execute("SELECT source_scope FROM mem_facts").fetchone()
    assert row == ([],)


# Lists (``services/management/queries.py``) read a fact's inherited session and metadata
# from this copy. The form they replaced — through ``mem_messages``, row by row — is the
# reference: the same facts pass and the same metadata comes back, for every filter shape.
_THROUGH_TURNS_METADATA = (
    "(SELECT coalesce(jsonb_object_agg(kv.key, kv.value), '{}'::jsonb) FROM ("
    "SELECT DISTINCT ON (e.key) e.key, e.value FROM unnest(f.source_message_ids) "
    "WITH ORDINALITY s(mid, ord) JOIN mem_messages sm ON sm.agent_id = f.agent_id "
    "AND sm.message_id = s.mid, jsonb_each(sm.metadata) e ORDER BY e.key, s.ord) kv)"
)
LIST_FILTERS: list[tuple[str | None, dict[str, Any] | None]] = [
    (None, None),
    ("s1", None),
    ("s2", None),
    ("nowhere", None),
    (None, {"topic": "tea"}),
    (None, {"topic": "tea", "n": 1}),
    (None, {"k": "v", "n": 1}),  # on two different turns of f1: no single turn passes
    (None, {"AND": [{"topic": "tea"}, {"n": {"eq": 1}}]}),
    (None, {"late": True}),
    (None, {"tags": {"contains": "a"}}),
    (None, {"topic": {"icontains": "TE"}}),
    (None, {"n": {"in": [1, 2]}}),
    (None, {"topic": {"ne": "tea"}}),
    (None, {"NOT": [{"topic": "tea"}]}),
    (None, {"OR": [{"topic": "tea"}, {"late": True}]}),
    (None, {"k": {"nin": ["v"]}}),
    ("s2", {"topic": "tea"}),  # f1: one turn in s2 (m3), another about tea (m1)
    ("s1", {"k": "v"}),
]


def through_turns(url: str, schema: str, session: str | None,
                  metadata: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    from engramdb.services.management.metadata_filter import MetadataFilter

    params: dict[str, Any] = {"a": AGENT}
    where = ["f.agent_id = %(a)s"]
    if session is not None:
        params["session"] = session
        where.append("EXISTS (SELECT 1 FROM mem_messages m WHERE m.agent_id = f.agent_id"
                     " AND m.message_id = ANY(f.source_message_ids) AND m.session_id = %(session)s)")
    if metadata is not None:
        passes = MetadataFilter(metadata).sql("sm.metadata", params)
        where.append("EXISTS (SELECT 1 FROM mem_messages sm WHERE sm.agent_id = f.agent_id"
                     f" AND sm.message_id = ANY(f.source_message_ids) AND ({passes}))")
    with psycopg.connect(url) as conn:
        conn.execute(f'SET search_path TO "{schema}", public')
        rows = conn.execute(
            f"SELECT f.fact_id, {_THROUGH_TURNS_METADATA} FROM mem_facts f WHERE {' AND '.join(where)}"
            " ORDER BY f.recorded_at, f.fact_id", params).fetchall()
    return [(fid, meta) for fid, meta in rows]


def test_lists_filter_and_show_metadata_through_the_copy_as_through_the_turns(
        pg_url: str, fresh_schema: Any) -> None:
    from psycopg_pool import ConnectionPool

    from engramdb.services.management.metadata_filter import MetadataFilter
    from engramdb.services.management.models import FactFilter, PageParams
    from engramdb.services.management.queries import list_entities, list_facts

    schema, env = fresh_schema("scopelist")
    app = EventLog(env)
    pool = ConnectionPool(pg_url, min_size=1, max_size=2, open=True,
                          kwargs={"options": f"-c search_path={schema},public"})
    try:
        with ProjectionSet.start(EventLog, env, HashEmbedder()) as ps:
            ps.wait(story(app, AGENT), timeout=30)
        passed: set[str] = set()
        for session, metadata in LIST_FILTERS:
            expected = through_turns(pg_url, schema, session, metadata)
            flt = None if metadata is None else MetadataFilter(metadata)
            for _ in range(7):  # past psycopg's prepare threshold: every plan gives the same rows
                page = list_facts(pool, AGENT, FactFilter(status="all", session=session, limit=50), flt)
                got = [(f.fact_id, f.metadata) for f in page.items]
                assert got == expected, (session, metadata)
            passed |= {fid for fid, _ in got}
            if session is None and flt is not None:
                entities = list_entities(pool, AGENT, PageParams(limit=50), flt).items
                active = [fid for fid, _ in expected if fid != "f2"]  # f2 was superseded by f3
                assert [(e.entity_key, e.active_facts) for e in entities] == (
                    [("person:ana", len(active))] if active else [])
        assert passed == {"f1", "f2", "f3"}  # the filters tell the facts apart
    finally:
        pool.close()
        app.close()


SCOPES = [
    [], [{"s": "s1", "m": {}}], [{"s": "a=b", "m": {"k": "v"}}, {"m": {"a": "b=c", "n": 1}}],
    [{"s": "s2", "m": {"a=b": "c", "flag": True, "tags": ["x"], "nested": {"k": "v"}}}],
    [{"m": {"flag": "true", "n": 1.0, "nul": None, "ü": "ção"}}], [{"s": None, "m": {"k": ""}}],
]
ELEMENTS = [
    {"s": "s1"}, {"s": "s2"}, {"s": "a=b"}, {"m": {"k": "v"}}, {"m": {"a": "b=c"}}, {"m": {"a=b": "c"}},
    {"m": {"a": "b"}}, {"m": {"flag": True}}, {"m": {"flag": "true"}}, {"m": {"flag": False}},
    {"m": {"ü": "ção"}}, {"m": {"k": ""}}, {"m": {"tags": "x"}}, {"m": {"n": 1}},
]


def test_a_scopes_exact_keys_hold_an_element_exactly_when_the_scope_contains_it(pg_url: str, fresh_schema) -> None:
    """``engramdb_scope_keys`` (the facts' indexed keys) against jsonb containment itself:
    for every element that has a key, the key is among the scope's keys exactly when the scope
    contains the element — keys and values holding ``=`` and ``:``, a string ``"true"`` beside
    a boolean, an empty string, non-ASCII text; numbers, nested values and arrays have none."""
    from engramdb.projections.scope_keys import SCOPE_KEYS_FUNCTION, scope_key

    schema, _env = fresh_schema("scope_keys")
    assert scope_key({"m": {"n": 1}}) is None and scope_key({"m": {"tags": ["x"]}}) is None
    assert scope_key({"s": "s1", "m": {"k": "v"}}) is None and scope_key({"m": {"a": "1", "b": "2"}}) is None
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}", public')
        conn.execute(SCOPE_KEYS_FUNCTION)
        checked = 0
        for scope in SCOPES:
            keys = conn.execute("SELECT engramdb_scope_keys(%s::jsonb)", (json.dumps(scope),)).fetchone()[0]
            for element in ELEMENTS:
                key = scope_key(element)
                if key is None:
                    continue
                contains = conn.execute("SELECT %s::jsonb @> %s::jsonb",
                                        (json.dumps(scope), json.dumps([element]))).fetchone()[0]
                assert (key in keys) is contains, (scope, element, keys)
                checked += contains
        assert checked >= 8, "most elements are contained in some scope"
