"""Retrieve narrowed to a session or a metadata filter (issue 24, ADR-0047) on real PostgreSQL.

Isolation between sessions is tested like isolation between agents: a query whose best match
sits in another session (the very words of that session's turn) never returns it — not as a
fact, not as a turn, not in the context — through every signal (semantic, keyword/BM25,
entity graph, the turns' lists, spreading) and both rankings. The EXPLAIN of the semantic and
keyword statements the pipeline sends shows the narrowing under their Limit. An unfiltered
call sends exactly the statements it sent before (no predicate at all).
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import psycopg
import pytest

from engramdb.infra.pgsql import vector_literal
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.memory.facade import Memory
from engramdb.services.retrieve import scope as scope_module
from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.scope import RetrieveFilter, narrowing, probe
from engramdb.services.retrieve.signals import bm25, graph, keyword, messages, semantic, shared
from engramdb.services.retrieve.signals.shared import fact_visibility, message_visibility

SESSIONS = {
    "s-home": ("I live in Recife with my cat Nina.", {"channel": "slack", "tags": ["home"]}),
    "s-work": ("I work at Acme as a welder.", {"channel": "email", "tags": ["work"]}),
    "s-hobby": ("I play the cello on Sundays.", {"channel": "slack", "tags": ["music"]}),
    "s-move": ("I bought a red bicycle called Rex.", {"channel": "phone", "tags": ["home"]}),
}
RANKINGS = [{}, {"ranking": "formula"}]


@pytest.fixture(params=["selective", "broad", "few-turns"])
def memory(request: pytest.FixtureRequest, fresh_schema: Any, agent_id: str,
           monkeypatch: pytest.MonkeyPatch) -> Any:
    """Every form of the narrowing: few passing turns (the overlap with the passing turns'
    ids, exact nearest rows), many (a probe of the turns per row, HNSW), and too many for
    the facts but few enough to search the turns exactly (``Narrowing.few_turns``)."""
    if request.param != "selective":
        monkeypatch.setattr(scope_module, "SELECTIVE_TURNS", 0)
        monkeypatch.setattr(scope_module, "SELECTIVE_COPIED_TURNS", 0)
        monkeypatch.setattr(scope_module, "SELECTIVE_KEYED_TURNS", 0)
    if request.param == "broad":
        monkeypatch.setattr(scope_module, "EXACT_TURNS", 0)
    # one session of four is a quarter of this tiny agent's turns: selective (or few) anyway
    monkeypatch.setattr(scope_module, "SELECTIVE_SHARE", 1.0)
    _schema, env = fresh_schema("scoped")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        last = None
        for session, (text, meta) in SESSIONS.items():
            last = mem.write(agent_id, text, speaker="Ana", session_id=session, metadata=meta)
        mem.wait_for_projections(last.position if last else None, agent_id=agent_id)
        yield mem


def _sessions_of(mem: Memory, agent_id: str, result: Any) -> set[str]:
    """The sessions of every fact's sources and every turn the result returned."""
    turns = {t.message_id: t.session_id for t in mem.list_messages(agent_id, limit=100).items}
    out = {e.session_id for e in result.events}
    for fact in result.facts:
        out |= {turns[m] for m in fact.source_message_ids if m in turns}
    return out


@pytest.mark.parametrize("overrides", RANKINGS)
def test_a_session_never_sees_another_sessions_best_match(memory: Memory, agent_id: str,
                                                          overrides: dict[str, Any]) -> None:
    home_text = SESSIONS["s-home"][0]
    wide = memory.retrieve(agent_id, home_text, config_overrides=overrides)
    assert "Recife" in wide.context  # unfiltered, the best match is found
    for query in (home_text, "Where does Ana live? Recife cat Nina", "Nina", "Ana"):
        got = memory.retrieve(agent_id, query, session_id="s-work", config_overrides=overrides)
        assert _sessions_of(memory, agent_id, got) <= {"s-work"}, (query, got.facts, got.events)
        assert "Recife" not in got.context and "Nina" not in got.context, got.context
        assert not got.profiles and not got.patterns
    both = memory.retrieve(agent_id, "Where does Ana live?", session_id=["s-home", "s-move"],
                           config_overrides=overrides)
    assert _sessions_of(memory, agent_id, both) <= {"s-home", "s-move"}
    assert "Acme" not in both.context and "cello" not in both.context


@pytest.mark.parametrize("overrides", RANKINGS)
def test_metadata_narrowing(memory: Memory, agent_id: str, overrides: dict[str, Any]) -> None:
    got = memory.retrieve(agent_id, "Recife cat Nina, bicycle Rex", config_overrides=overrides,
                          metadata={"tags": {"contains": "home"}, "channel": {"ne": "slack"}})
    assert _sessions_of(memory, agent_id, got) <= {"s-move"}
    assert "Recife" not in got.context and "bicycle" in got.context
    slack = memory.retrieve(agent_id, "bicycle called Rex", metadata={"channel": "slack"},
                            config_overrides=overrides)
    assert _sessions_of(memory, agent_id, slack) <= {"s-home", "s-hobby"}
    assert "bicycle" not in slack.context and "Rex" not in slack.context
    # session AND metadata: the same turn must satisfy both
    none = memory.retrieve(agent_id, "bicycle", session_id="s-move", metadata={"channel": "slack"},
                           config_overrides=overrides)
    assert not none.facts and not none.events


def test_the_sweep_facts_read_with_the_semantic_ones_are_the_same(memory: Memory, agent_id: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a selective narrowing the subject sweep's facts over every fact are read by the
    semantic search's statement (``sweep_merged.facts_merged``, one read of the listed facts,
    ADR-0047): the call returns exactly what the two statements apart return."""
    from engramdb.services.retrieve import signals, sweep_merged

    question, where = "What does Ana play on Sundays?", {"channel": "slack"}
    decided: list[bool] = []
    read_once: list[int] = []
    real, real_read = sweep_merged.facts_merged, signals.semantic_and_swept_facts
    monkeypatch.setattr(sweep_merged, "facts_merged",
                        lambda call, started: decided.append(real(call, started)) or decided[-1])
    monkeypatch.setattr(signals, "semantic_and_swept_facts",
                        lambda *a, **k: read_once.append(1) or real_read(*a, **k))
    merged = memory.retrieve(agent_id, question, metadata=where)  # merged while still embedding too
    monkeypatch.setattr(sweep_merged, "facts_merged", lambda call, started: False)
    apart = memory.retrieve(agent_id, question, metadata=where)
    assert merged.trace["subject_sweep"] is not None, "the question names a subject to sweep"
    selective = merged.trace["within_selective"]
    assert decided[-1] is selective and bool(read_once) is selective
    assert merged.facts and merged.trace["candidates"]["subject_facts"] > 0
    assert [(f.fact_id, f.score) for f in merged.facts] == [(f.fact_id, f.score) for f in apart.facts]
    assert [(e.message_id, e.score) for e in merged.events] == [(e.message_id, e.score) for e in apart.events]
    assert merged.context == apart.context
    assert merged.trace["candidates"] == apart.trace["candidates"]


def test_the_sweep_turns_read_with_the_turn_lists_are_the_same(memory: Memory, agent_id: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """When the narrowing's turns are searched exactly (selective, or few turns) the subject
    sweep's turns over every turn are read by the turn lists' statement on the events worker
    (``sweep_merged.turns_merged``, one read of the passing turns, ADR-0047): the call
    returns exactly what the two statements apart return, in both forms; walked (broad), the
    two stay apart."""
    from engramdb.services.retrieve import signals, sweep_merged

    question, where = "What does Ana play on Sundays?", {"channel": "slack"}
    decided: list[bool] = []
    read_once: list[int] = []
    real, real_read = sweep_merged.turns_merged, signals.message_lists_and_swept
    monkeypatch.setattr(sweep_merged, "turns_merged",
                        lambda *a: decided.append(real(*a)) or decided[-1])
    monkeypatch.setattr(signals, "message_lists_and_swept",
                        lambda *a, **k: read_once.append(1) or real_read(*a, **k))
    merged = memory.retrieve(agent_id, question, metadata=where)
    monkeypatch.setattr(sweep_merged, "turns_merged", lambda *a: False)
    apart = memory.retrieve(agent_id, question, metadata=where)
    assert merged.trace["subject_sweep"] is not None, "the question names a subject to sweep"
    exact = merged.trace["within_selective"] or merged.trace["within_few_turns"]
    assert decided == [exact] and bool(read_once) is exact
    assert merged.trace["candidates"]["subject_messages"] > 0
    assert [(f.fact_id, f.score) for f in merged.facts] == [(f.fact_id, f.score) for f in apart.facts]
    assert [(e.message_id, e.score) for e in merged.events] == [(e.message_id, e.score) for e in apart.events]
    assert merged.context == apart.context
    assert merged.trace["candidates"] == apart.trace["candidates"]


def test_bad_narrowing_is_a_value_error(memory: Memory, agent_id: str) -> None:
    with pytest.raises(ValueError, match="unknown operator"):
        memory.retrieve(agent_id, "x", metadata={"channel": {"like": "s%"}})
    with pytest.raises(ValueError, match="session_id"):
        memory.retrieve(agent_id, "x", session_id=[])
    with pytest.raises(ValueError, match="session_id"):
        memory.retrieve(agent_id, "x", session_id=[3])  # type: ignore[list-item]


def _schema_conn(memory: Memory, pg_url: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(pg_url)
    conn.execute(f'SET search_path TO "{memory.cells[0].schema}", public')
    return conn


@pytest.mark.parametrize("copied", [True, False])
@pytest.mark.parametrize("form", ["broad", "few-turns", "selective"])
def test_every_signal_statement_is_narrowed(memory: Memory, agent_id: str, pg_url: str,
                                            form: str, copied: bool) -> None:
    """Each signal on its own, asked with the other session's own words / entities: nothing of
    it comes back, while the same call unnarrowed finds it (both the probe-per-row and the
    selective form of the fact predicate, the turns walked or searched exactly, each through
    the facts' own copy of their turns' scope and through the turns themselves)."""
    selective = form == "selective"
    cfg = RetrieveConfig()
    emb = HashEmbedder(384)
    home_text = SESSIONS["s-home"][0]
    qvec = vector_literal(emb.embed([home_text])[0])
    base = narrowing(RetrieveFilter.of("s-work"), fact_copy=copied)
    assert base is not None and base.copied is copied
    with _schema_conn(memory, pg_url) as conn:
        scope = probe(conn, agent_id, base, cap=1000 if selective else 0, share=1.0,
                      turns_cap=0 if form == "broad" else 1000)
        assert scope is not None and scope.selective is selective
        assert scope.few_turns is (form == "few-turns")
        facts = {f.fact_id: f for f in memory.list_facts(agent_id, limit=100).items}
        home = {fid for fid, f in facts.items() if "Recife" in f.text}
        assert home, [f.text for f in facts.values()]
        turns = {t.message_id: t.session_id for t in memory.list_messages(agent_id, limit=100).items}
        home_turns = {m for m, s in turns.items() if s == "s-home"}
        checks = {
            "semantic": lambda s: {i for i, _ in semantic.semantic_facts(conn, agent_id, qvec, cfg, 0.0, None, scope=s)},
            "keyword": lambda s: {i for i, _ in keyword.keyword_facts(conn, agent_id, ["recife", "nina"], cfg, None,
                                                                      scope=s)},
            "bm25": lambda s: {i for i, _ in bm25.bm25_facts(conn, agent_id, home_text, None, 0.0, 50, scope=s)},
            "graph": lambda s: {i for _, i in graph.linked_with_specificity(
                conn, agent_id, sorted({facts[f].entity_key for f in home}), 50, cfg, None, scope=s)[0]},
        }
        for name, run in checks.items():
            assert run(None) & home, name  # the signal does find it unnarrowed
            assert not run(scope) & home, name
        turn_checks = {
            "turns": lambda s: {r[0] for r in messages.message_lists(conn, agent_id, qvec, home_text, cfg, 0.0, None,
                                                                     scope=s)[1]},
            "turns-keyword": lambda s: set(messages.message_events(conn, agent_id, qvec, ["recife"], cfg, 0.0, None,
                                                                   scope=s)[0]),
            "turns-bm25": lambda s: {i for i, _ in bm25.bm25_messages(conn, agent_id, home_text, None, 50, scope=s)},
        }
        for name, run in turn_checks.items():
            assert run(None) & home_turns, name
            assert not run(scope) & home_turns, name


def test_unfiltered_statements_carry_no_predicate() -> None:
    for as_of in (None, "t"):
        assert fact_visibility(as_of) == fact_visibility(as_of, scope=None)  # type: ignore[arg-type]
        assert "mem_messages nw" not in fact_visibility(as_of)  # type: ignore[arg-type]
        assert "nw" not in message_visibility(as_of)  # type: ignore[arg-type]
    assert narrowing(None) is None and RetrieveFilter.of(None, None) is None


def _explain(conn: Any, sql: str, params: dict[str, Any]) -> str:
    return "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, params).fetchall())


def test_explain_shows_the_narrowing_under_the_limit(memory: Memory, agent_id: str, pg_url: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The very semantic and keyword (BM25) statements a narrowed retrieve sends: EXPLAINed, the
    session predicate is a filter below the Limit node, never a step after it."""
    sent: list[tuple[str, dict[str, Any]]] = []
    real_execute = psycopg.Connection.execute

    def spy(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        if isinstance(query, str) and isinstance(params, dict) and "nws" in params:
            sent.append((query, dict(params)))
        return real_execute(self, query, params, **kw)

    monkeypatch.setattr(psycopg.Connection, "execute", spy)
    memory.retrieve(agent_id, "Where does Ana live? Recife", session_id="s-work",
                    config_overrides={"ranking": "formula"})
    memory.retrieve(agent_id, "Where does Ana live? Recife", session_id="s-work")
    monkeypatch.undo()
    semantic_sql = next(s for s in sent if "FROM mem_facts f" in s[0] and "embedding <=>" in s[0]
                        and "nn AS MATERIALIZED" in s[0])
    keyword_sql = next(s for s in sent if "FROM mem_facts f" in s[0] and "/ %(k)s AS s" in s[0])
    bm25_sql = next(s for s in sent if "search_tsv" in s[0] and "mem_facts" in s[0])
    with _schema_conn(memory, pg_url) as conn:
        for name, (sql, params) in {"semantic": semantic_sql, "keyword": keyword_sql, "bm25": bm25_sql}.items():
            plan = _explain(conn, sql, params)
            # broad: the turns' session test per row; selective: the facts of the passing
            # turns, listed once per call by ``probe`` (``nwf``). BM25 scores against the whole
            # memory and keeps the passing hits (``keep``) or probes its scored rows in order
            if name == "bm25":
                assert "source_scope @> %(nwc)s" in sql, sql  # one session: the facts' own copy
                marker = "Filter: keep" if "Filter: keep" in plan else "SubPlan"
                assert plan.index("Limit") < plan.rindex(marker), (name, plan)
                continue
            # selective: ``fact_id = ANY`` of the listed ids (the primary key finds them), or
            # joined to them (``IN (SELECT unnest(nwf))``: a ProjectSet of the list)
            # one session is one containment: the facts' own copy of their turns' scope
            # (``source_scope``), tested on the row; selective, found by the exact index of
            # its keys (``engramdb_scope_keys``)
            marker = next((m for m in ("source_scope @>", "engramdb_scope_keys(source_scope) &&", "session_id = ANY",
                                       "fact_id = ANY", "ProjectSet") if m in plan), "?")
            assert marker in ("source_scope @>", "engramdb_scope_keys(source_scope) &&") and "Limit" in plan, (name, plan)
            assert plan.index("Limit") < plan.rindex(marker), (name, plan)


def test_async_retrieve_takes_the_same_narrowing(memory: Memory, agent_id: str) -> None:
    import asyncio

    from engramdb.services.memory.async_facade import AsyncMemory

    async def go() -> Any:
        amem = AsyncMemory(memory)
        try:
            return await amem.retrieve(agent_id, SESSIONS["s-home"][0], session_id="s-work")
        finally:
            await amem.aclose() if hasattr(amem, "aclose") else None

    got = asyncio.run(go())
    sync = memory.retrieve(agent_id, SESSIONS["s-home"][0], session_id="s-work")
    assert [f.fact_id for f in got.facts] == [f.fact_id for f in sync.facts]
    assert [e.message_id for e in got.events] == [e.message_id for e in sync.events]
    assert "Recife" not in got.context


@pytest.mark.parametrize("memory", ["selective"], indirect=True)
def test_few_turns_search_the_turns_exactly_and_walk_the_facts(memory: Memory, agent_id: str, pg_url: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``Narrowing.few_turns`` (too many passing turns for the facts' exact search, few enough
    for the turns'): every turn search takes the exact branch — the same turns, cosines and
    order as the selective form — while the facts' search stays the walk of the broad form,
    though the size gate said the agent is large (``small=False``)."""
    from engramdb.services.retrieve import subject_sweep

    cfg = RetrieveConfig()
    emb = HashEmbedder(384)
    base = narrowing(RetrieveFilter.of(["s-home", "s-move"]))
    sent: list[str] = []
    real_execute = psycopg.Connection.execute

    def spy(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        if isinstance(query, str) and "nn AS MATERIALIZED" in query:
            sent.append(query)
        return real_execute(self, query, params, **kw)

    with _schema_conn(memory, pg_url) as conn:
        forms = {"few": probe(conn, agent_id, base, cap=0, share=1.0, turns_cap=1000),
                 "selective": probe(conn, agent_id, base, cap=1000, share=1.0),
                 "broad": probe(conn, agent_id, base, cap=0, share=1.0, turns_cap=0)}
        assert forms["few"] is not None and forms["few"].few_turns and not forms["few"].selective
        subject = subject_sweep.Subject(entity_keys=(), speakers=("ana",), stripped_query="")
        monkeypatch.setattr(psycopg.Connection, "execute", spy)
        for text in (SESSIONS["s-home"][0], "bicycle", "cello on Sundays"):
            qvec = vector_literal(emb.embed([text])[0])
            got: dict[str, Any] = {}
            for name, scope in forms.items():
                sent.clear()
                events = messages.message_events(conn, agent_id, qvec, [], cfg, -1.0, None, exact_rows=10,
                                                 small=False, scope=scope)
                lists = messages.message_lists(conn, agent_id, qvec, text, cfg, -1.0, None, exact_rows=10,
                                               small=False, bm25_found=[], scope=scope)
                swept = subject_sweep.sweep(conn, agent_id, subject, qvec, as_of=None, min_confidence=0.0,
                                            limit=10, ef_search=40, exact_rows=10, small=(False, False),
                                            only_subject=False, scope=scope)
                facts = semantic.semantic_facts(conn, agent_id, qvec, cfg, -1.0, None, exact_rows=10,
                                                small=False, scope=scope)
                got[name] = (events, lists[:2], swept.message_ids)
                turn_sql = [q for q in sent if "FROM mem_messages m" in q]
                fact_sql = [q for q in sent if "FROM mem_facts f" in q]
                assert len(turn_sql) == 3 and len(fact_sql) == 2, sent
                exact = "embedding <=> %(q)s::vector) + 0"  # the exact branch's ORDER BY
                assert all((exact in q) is (name != "broad") for q in turn_sql), (name, turn_sql)
                assert all((exact in q) is (name == "selective") for q in fact_sql), (name, fact_sql)
                assert facts is not None
            assert got["few"] == got["selective"], text
            assert got["few"][0][0], text  # turns were found


def test_probe_weighs_the_share_of_passing_turns(memory: Memory, agent_id: str, pg_url: str) -> None:
    """Selective needs few passing turns AND a small share of the agent's: one session of
    this agent's four is a quarter of its turns (ADR-0047: the overlap form costs ~ passing²,
    a filtered HNSW walk ~ 1 / share)."""
    one = narrowing(RetrieveFilter.of("s-work"))
    none_pass = narrowing(RetrieveFilter.of(metadata={"channel": "fax"}))
    with _schema_conn(memory, pg_url) as conn:
        verdicts = {share: probe(conn, agent_id, one, cap=1000, share=share) for share in (1.0, 0.3, 0.25, 0.2)}
        assert {s: v.selective for s, v in verdicts.items() if v} == {1.0: True, 0.3: True, 0.25: False, 0.2: False}
        assert probe(conn, agent_id, one, cap=0, share=1.0).selective is False  # type: ignore[union-attr]
        empty = probe(conn, agent_id, none_pass, cap=1000, share=0.01)
        assert empty is not None and empty.selective  # nothing passes: the exact search over nothing


@pytest.mark.parametrize("copied", [False, True])
@pytest.mark.parametrize("head", [1, 4])
def test_broad_forms_return_the_same_nearest_facts(memory: Memory, agent_id: str, pg_url: str, head: int,
                                                   copied: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The exact nearest-facts branch under a broad narrowing tests its per-row probe late (on
    the rows in distance order until the limit passes, ``nearest_cte``'s ``late``): the same
    facts in the same order as the selective form, which tests it first — and only facts of
    a passing turn, for every limit; whether the ``head`` × limit nearest rows hold enough
    passing ones (``LATE_HEAD``) or the statement goes on over all of them. Through the facts'
    own copy of their turns' scope (``copied``) both forms test the row's column first."""
    monkeypatch.setattr(shared, "LATE_HEAD", head)
    cfg = RetrieveConfig()
    emb = HashEmbedder(384)
    base = narrowing(RetrieveFilter.of(metadata={"channel": "slack"}), fact_copy=copied)
    turns = {t.message_id: t.metadata for t in memory.list_messages(agent_id, limit=100).items}
    facts = {f.fact_id: f for f in memory.list_facts(agent_id, limit=100).items}
    passing = {fid for fid, f in facts.items()
               if any(turns.get(m, {}).get("channel") == "slack" for m in f.source_message_ids)}
    assert passing and passing != set(facts)
    with _schema_conn(memory, pg_url) as conn:
        broad = probe(conn, agent_id, base, cap=0)
        selective = probe(conn, agent_id, base, cap=1000, share=1.0)
        assert broad is not None and not broad.selective and selective is not None and selective.selective
        for text in (SESSIONS["s-home"][0], SESSIONS["s-work"][0], "cello"):
            qvec = vector_literal(emb.embed([text])[0])
            for pool in (1, 2, 60):
                c = cfg.model_copy(update={"candidates": cfg.candidates.model_copy(update={"candidate_pool": pool})})
                got = {name: semantic.semantic_facts(conn, agent_id, qvec, c, -1.0, None, exact_rows=10**6,
                                                     small=True, scope=s)
                       for name, s in (("broad", broad), ("selective", selective))}
                assert got["broad"] == got["selective"], (text, pool, got)
                assert got["broad"] and {i for i, _ in got["broad"]} <= passing, (text, pool)


@pytest.mark.parametrize("memory", ["selective"], indirect=True)
def test_a_broad_verdict_is_kept_and_a_selective_one_is_read_every_call(
        memory: Memory, agent_id: str, pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``BroadVerdicts``: a narrowing more than ``SELECTIVE_TURNS`` turns pass stays broad (turns
    are append-only), so its probe runs once per ``ttl``; broad by share only for ``share_ttl``;
    a selective one that lists its facts (``nwf``) is probed on every call. (Tested through
    the source turns: a copied selective verdict lists nothing and is kept, below.)"""
    now = [0.0]
    kept = scope_module.BroadVerdicts(ttl=100.0, share_ttl=10.0, clock=lambda: now[0])
    slack = narrowing(RetrieveFilter.of(metadata={"channel": "slack"}), fact_copy=False)
    with _schema_conn(memory, pg_url) as conn:
        probes: list[str] = []
        real = conn.execute

        def spy(query: Any, params: Any = None, **kw: Any) -> Any:
            if isinstance(query, str) and "WITH p AS MATERIALIZED" in query:
                probes.append(query)
            return real(query, params, **kw)

        monkeypatch.setattr(conn, "execute", spy)

        few: list[bool] = []

        def probed(at: float, cap: int, share: float, turns: int | None = None) -> tuple[bool, int]:
            now[0] = at
            monkeypatch.setattr(scope_module, "SELECTIVE_TURNS", cap)
            monkeypatch.setattr(scope_module, "SELECTIVE_COPIED_TURNS", cap)
            monkeypatch.setattr(scope_module, "SELECTIVE_KEYED_TURNS", cap)
            monkeypatch.setattr(scope_module, "EXACT_TURNS", cap if turns is None else turns)
            monkeypatch.setattr(scope_module, "SELECTIVE_SHARE", share)
            before = len(probes)
            got = kept.probe(conn, agent_id, slack)
            assert got is not None
            few.append(got.few_turns)
            return got.selective, len(probes) - before

        assert probed(0.0, 1000, 1.0) == (True, 1)  # selective: probed ...
        assert probed(1.0, 1000, 1.0) == (True, 1)  # ... on every call
        assert probed(2.0, 1, 1.0) == (False, 1)  # two slack turns > 1: broad by count
        assert probed(3.0, 1000, 1.0) == (False, 0)  # kept (turns only grow) ...
        assert probed(101.0, 1000, 1.0) == (False, 0)  # ... for ttl
        assert probed(103.0, 1000, 1.0) == (True, 1)
        kept = scope_module.BroadVerdicts(ttl=100.0, share_ttl=10.0, clock=lambda: now[0])
        assert probed(0.0, 1000, 0.01) == (False, 1)  # broad by share (half of the turns)
        assert probed(5.0, 1000, 1.0) == (False, 0)  # kept for share_ttl only
        assert probed(11.0, 1000, 1.0) == (True, 1)
        # too many passing turns for the facts, few enough to search the turns exactly: kept
        # with that verdict for share_ttl (the turns may grow past EXACT_TURNS), then probed
        kept = scope_module.BroadVerdicts(ttl=100.0, share_ttl=10.0, clock=lambda: now[0])
        assert probed(0.0, 1, 1.0, turns=1000) == (False, 1) and few[-1]
        assert probed(5.0, 1, 1.0, turns=1000) == (False, 0) and few[-1]
        assert probed(11.0, 1, 1.0, turns=1) == (False, 1) and not few[-1]  # now more than allowed
        assert probed(50.0, 1, 1.0, turns=1000) == (False, 0) and not few[-1]  # kept for ttl
        assert probed(112.0, 1, 1.0, turns=1000) == (False, 1) and few[-1]
        # a copied selective verdict (nothing listed for the call) is kept share_ttl
        slack = narrowing(RetrieveFilter.of(metadata={"channel": "slack"}))
        assert slack is not None and slack.copied
        kept = scope_module.BroadVerdicts(ttl=100.0, share_ttl=10.0, clock=lambda: now[0])
        assert probed(0.0, 1000, 1.0) == (True, 1)
        assert probed(5.0, 1000, 1.0) == (True, 0)
        assert probed(11.0, 1, 1.0) == (False, 1)  # probed again: now broad by count


def test_index_order_only_holds_inside_and_is_put_back(memory: Memory, pg_url: str) -> None:
    """The narrowed neighbour walk runs without bitmap scans (``index_order_only``); the
    setting is the block's alone — the pooled connection gets its own value back."""
    with _schema_conn(memory, pg_url) as conn, conn.transaction():
        with shared.index_order_only(conn):
            inside = conn.execute("SELECT current_setting('enable_bitmapscan')").fetchone()
        after = conn.execute("SELECT current_setting('enable_bitmapscan')").fetchone()
    assert inside is not None and inside[0] == "off"
    assert after is not None and after[0] == "on"


def test_a_known_number_of_turns_spares_the_count(memory: Memory, agent_id: str, pg_url: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``probe_counted``'s ``turns_known`` (a lower bound of the agent's turns that
    ``BroadVerdicts`` keeps, turns being append-only) decides the share without counting
    them; a bound too low to decide is counted past, as without one."""
    # 2 of the 4 turns; through the source turns, so that a selective probe lists the facts
    slack = narrowing(RetrieveFilter.of(metadata={"channel": "slack"}), fact_copy=False)
    assert slack is not None
    with _schema_conn(memory, pg_url) as conn:
        broad, passing, counted = scope_module.probe_counted(conn, agent_id, slack, cap=1000, share=0.3)
        assert (broad.selective, passing, counted) == (False, 2, 4)
        low = scope_module.probe_counted(conn, agent_id, slack, cap=1000, share=0.3, turns_known=3)
        assert (low[0].selective, low[2]) == (False, 4)
        told = scope_module.probe_counted(conn, agent_id, slack, cap=1000, share=0.3, turns_known=100)
        assert told[0].selective and told[2] == 0  # 2 of at least 100 turns: under 30 %, not counted
        assert told[0].params["nwf"]
        monkeypatch.setattr(scope_module, "SELECTIVE_TURNS", 1000)
        monkeypatch.setattr(scope_module, "SELECTIVE_COPIED_TURNS", 1000)
        monkeypatch.setattr(scope_module, "SELECTIVE_SHARE", 0.3)
        kept = scope_module.BroadVerdicts()
        assert kept.probe(conn, agent_id, slack) is not None
        assert kept._turns[agent_id][1] == 4  # the count is kept as the agent's lower bound


def test_a_narrowed_neighbour_walk_finds_the_first_passing_turns_in_order(
        fresh_schema: Any, agent_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tail_lists.neighbours`` under a narrowing (the walk in index order, ``index_order_only``):
    the ``span`` passing turns said just before and after each anchor in its session, in order,
    also at the session's edges. Checked against the turns listed in Python: passing ones rare
    and spread, passing ones clustered."""
    from engramdb.services.retrieve import tail_lists

    _schema, env = fresh_schema("nbwalk")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        for i in range(60):
            meta = {"rare": "yes" if i % 11 == 3 else "no", "half": "yes" if (i // 5) % 2 else "no"}
            mem.write(agent_id, f"turn number {i} about topic {i % 7}", speaker="Ana",
                      session_id=f"s{i % 2}", message_id=f"m{i:02d}", metadata=meta, infer=False)
        mem.wait_for_projections()
        turns = sorted(mem.list_messages(agent_id, limit=100).items, key=lambda t: (t.occurred_at, t.message_id))
        anchors = ["m00", "m13", "m30", "m47", "m59"]
        with mem.cell(agent_id).pool.connection() as conn:
            for tree, copied in itertools.product(({"rare": "yes"}, {"half": "yes"}), (True, False)):
                compiled = narrowing(RetrieveFilter.of(metadata=tree), fact_copy=copied)
                # probed as selective, the passing turns listed by the probe (``nwt``) when it
                # lists the facts too: the index-only walk (ADR-0047); a copied verdict (kept
                # across calls) lists none: the walk reads its anchors' sessions' passing turns
                listed = probe(conn, agent_id, compiled, cap=1000, share=1.0)
                assert listed is not None and ("nwt" in listed.params) is not copied
                assert (listed.listed_turns() is not None) is not copied and listed.lists_turns_late is copied
                for scope, span in itertools.product((compiled, listed), (1, 2, 3)):
                    got = tail_lists.neighbours(conn, agent_id, anchors, span, None, scope=scope)
                    expected = []
                    for anchor in anchors:
                        a = next(t for t in turns if t.message_id == anchor)
                        same = [t for t in turns if t.session_id == a.session_id
                                and all(t.metadata.get(k) == v for k, v in tree.items())]
                        before = [t for t in same if (t.occurred_at, t.message_id) < (a.occurred_at, a.message_id)]
                        after = [t for t in same if (t.occurred_at, t.message_id) > (a.occurred_at, a.message_id)]
                        expected += [(anchor, t.message_id, -k) for k, t in enumerate(reversed(before[-span:]), 1)]
                        expected += [(anchor, t.message_id, k) for k, t in enumerate(after[:span], 1)]
                    pairs = sorted((p[0], p[1], p[2]) for p in got.pairs)
                    assert pairs == sorted(expected), (tree, copied, span, scope.selective)
                    assert {p[1] for p in got.pairs} == set(got.rows), "each neighbour comes with its row"
                if copied:
                    _late_walk_reads_the_anchor_sessions(conn, agent_id, anchors, listed)
                else:
                    _listed_walk_is_index_only(conn, agent_id, anchors, listed)
            # passing turns dense in their sessions (here: more than 1 a session) are not listed
            monkeypatch.setattr(scope_module, "LISTED_WALK_PER_SESSION", 1)
            dense = probe(conn, agent_id, narrowing(RetrieveFilter.of(metadata={"half": "yes"})), cap=1000, share=1.0)
            assert dense is not None and dense.selective and dense.listed_turns() is None


def _late_walk_reads_the_anchor_sessions(conn: Any, agent_id: str, anchors: list[str], late: Any) -> None:
    """A copied sparse narrowing's walk is ONE statement — no listing of every passing turn of
    the agent before it — which reads the passing turns of the anchors' sessions only."""
    from engramdb.services.retrieve import tail_lists

    sent: list[str] = []

    class Recording:
        def execute(self, statement: str, params: Any = None) -> Any:
            sent.append(statement)
            return conn.execute(statement, params)

        def __getattr__(self, name: str) -> Any:
            return getattr(conn, name)

    expected = tail_lists.neighbours(conn, agent_id, anchors, 2, None, scope=late)
    got = tail_lists.neighbours(Recording(), agent_id, anchors, 2, None, scope=late)
    assert got.pairs and sorted(got.pairs) == sorted(expected.pairs)
    reads = [s for s in sent if "mem_messages" in s]
    assert len(reads) == 1, reads
    assert "i.session_id = ANY((SELECT array_agg(DISTINCT a.session_id) FROM a)::text[])" in reads[0]


def _listed_walk_is_index_only(conn: Any, agent_id: str, anchors: list[str], listed: Any) -> None:
    """The statement the listed walk sends tests only columns of the session-order index: with
    sequential scans off (a 60-turn table is otherwise read whole), its walks are index-only
    scans of it — the rows left out are never read (ADR-0047)."""
    from engramdb.services.retrieve import tail_lists

    sent: list[tuple[str, Any]] = []

    class Recording:
        def execute(self, statement: str, params: Any = None) -> Any:
            if statement.startswith("WITH a AS"):
                sent.append((statement, params))
            return conn.execute(statement, params)

        def __getattr__(self, name: str) -> Any:
            return getattr(conn, name)

    was = conn.autocommit
    conn.commit()
    conn.autocommit = True
    conn.execute("VACUUM mem_messages")  # an index-only scan's plan counts the visible pages
    conn.autocommit = was
    with conn.transaction():
        tail_lists.neighbours(Recording(), agent_id, anchors, 2, None, scope=listed)
        statement, params = sent[-1]
        conn.execute("SET LOCAL enable_seqscan = off")
        conn.execute("SET LOCAL enable_bitmapscan = off")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + statement, params).fetchall())
    walks = [line for line in plan.splitlines() if re.search(r"on mem_messages i(_1)?\b", line)]
    assert len(walks) == 2, plan  # one walk a side
    assert all(re.search(r"Index Only Scan (Backward )?using mem_messages_session_order", line)
               for line in walks), plan


CONTAINMENTS = [
    ("s-home", None), (None, {"channel": "slack"}), (None, {"channel": {"eq": "email"}}),
    ("s-hobby", {"channel": "slack"}), ("s-move", {"channel": "slack"}), (None, {"tags": ["home"]}),
    (None, {"AND": [{"channel": "slack"}, {"tags": ["music"]}]}), (None, {"channel": "fax"}),
    # an OR of containments (``MetadataFilter.branches``): one per branch, the copy holding one
    (None, {"channel": {"in": ["email", "fax"]}}), (["s-home", "s-hobby"], None),
    ("s-move", {"OR": [{"channel": "email"}, {"tags": ["home"]}]}), (None, {"OR": [{"channel": "fax"}, {"tags": ["music"]}]}),
]


def test_a_facts_copy_of_its_turns_scope_passes_the_same_facts(memory: Memory, agent_id: str, pg_url: str) -> None:
    """``scope_containments``: a filter that is containments of a turn's scope tests facts on
    their own ``source_scope`` copy — exactly the facts one of whose source turns passes, the
    rule the source-turn test (``fact_copy=False``) spells out; both forms, every filter."""
    with _schema_conn(memory, pg_url) as conn:
        def passing(scope: Any, form: str) -> set[str]:
            test = scope.fact("f") if form == "row" else scope.fact_by_key("f")
            return {r[0] for r in conn.execute(
                f"SELECT f.fact_id FROM mem_facts f WHERE f.agent_id = %(a)s AND {test}",
                {"a": agent_id, **scope.params}).fetchall()}

        seen = keyed = 0
        for session, tree in CONTAINMENTS:
            flt = RetrieveFilter.of(session, tree)
            assert flt is not None
            plain = probe(conn, agent_id, narrowing(flt, fact_copy=False), cap=1000, share=1.0)
            for cap in (0, 1000):  # broad, selective
                copied = probe(conn, agent_id, narrowing(flt), cap=cap, share=1.0)
                assert copied is not None and copied.copied and plain is not None and not plain.copied
                assert "nwf" not in copied.params  # nothing listed: the facts carry their scope
                for form in ("row", "key"):
                    assert passing(copied, form) == passing(plain, "row"), (session, tree, cap, form)
                keyed += cap > 0 and copied.keyed  # selective: found by the exact keys' index
            seen += bool(passing(plain, "row"))
        assert seen >= 5, "most of these filters pass some facts"
        assert keyed == 6, "sessions and single string values are keyed (projections/scope_keys.py)"


@pytest.mark.parametrize("overrides", RANKINGS)
def test_a_retrieve_through_the_facts_copy_returns_what_the_turns_give(
        memory: Memory, agent_id: str, overrides: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole calls, both rankings, both forms of the fixture: the same facts, turns, scores and
    context whether facts are narrowed by their own copy or through their source turns."""
    from engramdb.services.retrieve import pipeline

    def results(copy: bool) -> list[Any]:
        monkeypatch.setattr(pipeline, "narrowing", lambda flt: narrowing(flt, fact_copy=copy))
        out = []
        for (session, tree), question in itertools.product(CONTAINMENTS[:7] + CONTAINMENTS[-4:], ("Where does Ana live?", "cello")):
            got = memory.retrieve(agent_id, question, session_id=session, metadata=tree, config_overrides=overrides)
            out.append(([(f.fact_id, f.score) for f in got.facts], [(e.message_id, e.score) for e in got.events],
                        got.context))
        return out

    assert results(True) == results(False)


@pytest.mark.parametrize("memory", ["selective"], indirect=True)
def test_a_database_without_the_facts_keys_takes_their_containments(memory: Memory, agent_id: str,
                                                                     pg_url: str) -> None:
    """A retrieve-only process upgraded before the projector whose schema setup indexes the
    facts' keys: a narrowing that has keys is probed, finds no index, and tests the facts'
    containments — the answer it gives once the index is there, and no error."""
    query = "Where does Ana live? Recife cat Nina"
    with _schema_conn(memory, pg_url) as conn:
        conn.execute("DROP INDEX mem_facts_scope_keys")
        conn.commit()
        compiled = narrowing(RetrieveFilter.of(["s-home", "s-hobby"]))
        assert compiled is not None and compiled.keyed
        decided = probe(conn, agent_id, compiled, cap=1000, share=1.0)
        assert decided is not None and decided.selective and not decided.keyed
        assert "engramdb_scope_keys" not in decided.fact_by_key("f")
    without = memory.retrieve(agent_id, query, session_id=["s-home", "s-hobby"])
    with _schema_conn(memory, pg_url) as conn:
        for statement in memory_ddl_adding_the_keys():
            conn.execute(statement)
        conn.commit()
        assert probe(conn, agent_id, compiled, cap=1000, share=1.0).keyed  # type: ignore[union-attr]
    memory.close()  # a fresh process: no verdict kept from before
    with Memory.open(env=memory.env, embedder=HashEmbedder(384), llm=None, quiet=True) as fresh:
        keyed = fresh.retrieve(agent_id, query, session_id=["s-home", "s-hobby"])
    assert [f.fact_id for f in keyed.facts] == [f.fact_id for f in without.facts] and without.facts
    assert keyed.context == without.context and "Recife" in keyed.context


def memory_ddl_adding_the_keys() -> list[str]:
    """What the next schema setup runs for the keys on a database without them."""
    from engramdb.projections.scope_keys import SCOPE_KEYS_FUNCTION, SCOPE_KEYS_INDEX

    return [SCOPE_KEYS_FUNCTION, SCOPE_KEYS_INDEX]
