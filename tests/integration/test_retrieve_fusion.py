"""The default ranking, reciprocal-rank fusion of facts and turns (ADR-0009), end to end
against real PostgreSQL + pgvector (read-model rows written directly, as in the other
retrieve tests)."""

# ruff: noqa: F811  (pytest fixtures imported from test_retrieve_support)
from __future__ import annotations

from datetime import UTC, datetime, timedelta

from test_retrieve_support import (  # noqa: F401  (fixtures)
    MARCOS,
    T0,
    Store,
    load_worked_examples,
    retriever,
    store,
)

from engramdb.services.retrieve import Retriever
from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.signals import (
    bm25_messages,
    message_events,
    message_lists,
    message_rows,
)


def test_default_ranking_is_rank_fusion_and_answers_the_worked_example(
    retriever: Retriever, store: Store, agent_id: str
) -> None:
    assert RetrieveConfig().scoring.ranking == "rrf"
    load_worked_examples(store, agent_id)
    result = retriever.retrieve(agent_id, "Where does Marcos Tavares live?")
    assert result.facts[0].fact_id == "f_marcos_home" and result.facts[0].entity_key == MARCOS
    assert all(0.0 < f.score <= 1.0 and abs(f.scores["rrf"] - f.score) < 1e-6 for f in result.facts)
    assert [f.score for f in result.facts] == sorted((f.score for f in result.facts), reverse=True)
    assert "fuse" in result.trace["timings_ms"] and result.trace["candidates"]["fused"] >= len(result.facts)
    # the turn that says it is returned too, ranked by its own lists
    assert "m_marcos" in [e.message_id for e in result.events]


def test_a_turn_is_found_by_bm25_stemming_alone(retriever: Retriever, store: Store, agent_id: str) -> None:
    store.message(agent_id, "m_run", "Yesterday Bruno ran another marathon with his team", T0)
    store.message(agent_id, "m_other", "The weather was grey all week", T0)
    # the test embedder is an exact bag of words: "marathons" shares no token with the turn,
    # only BM25's English stemming (marathons -> marathon) connects them
    result = retriever.retrieve(agent_id, "marathons")
    events = {e.message_id: e for e in result.events}
    assert list(events)[0] == "m_run"
    assert events["m_run"].scores["rank_message_keyword"] == 1.0
    assert "rank_message_semantic" not in events["m_run"].scores
    # the other turn of the session comes only as m_run's neighbour (ADR-0037), below it
    assert set(events) == {"m_run", "m_other"} and set(events["m_other"].scores) >= {"rank_message_neighbour"}
    assert not {"rank_message_keyword", "rank_message_semantic"} & set(events["m_other"].scores)


def test_a_fact_and_the_turn_it_came_from_never_both_take_a_slot(
    retriever: Retriever, store: Store, agent_id: str
) -> None:
    store.entity(agent_id, "person:ana", "Ana")
    store.message(agent_id, "m_move", "Ana moved to Lisbon last spring", T0, speaker="Ana")
    store.fact(agent_id, "f_lisbon", "person:ana", "Ana lives in Lisbon", source_message_id="m_move")
    result = retriever.retrieve(agent_id, "Does Ana live in Lisbon?")
    shown = [f.fact_id for f in result.facts] + [e.message_id for e in result.events]
    assert ("f_lisbon" in shown) != ("m_move" in shown)
    assert result.trace["candidates"]["dropped_repeats"] == 1


def test_graph_list_is_a_switch(retriever: Retriever, store: Store, agent_id: str) -> None:
    load_worked_examples(store, agent_id)
    query = "What happened with Vertix?"
    # the subject sweep (ADR-0025) ranks every fact by the name-less question: off here, so
    # only the graph list differs between the two calls
    no_sweep = {"fact_subject": 0.0, "message_subject": 0.0}
    off = retriever.retrieve(agent_id, query, config_overrides={"rrf_weights": {"fact_graph": 0.0, **no_sweep}})
    on = retriever.retrieve(agent_id, query, config_overrides={"rrf_weights": {"fact_graph": 1.0, **no_sweep}})
    # Ricardo's fact shares no word or vector with the query: only the graph reaches it
    assert "f_ricardo_cofounder" not in [f.fact_id for f in off.facts]
    ricardo = [f for f in on.facts if f.fact_id == "f_ricardo_cofounder"]
    assert ricardo and ricardo[0].scores["rank_fact_graph"] >= 1.0


def test_same_query_same_memory_same_answer(retriever: Retriever, store: Store, agent_id: str) -> None:
    load_worked_examples(store, agent_id)
    runs = [retriever.retrieve(agent_id, "Tell me about Bruno and marathons") for _ in range(3)]
    shapes = {(tuple((f.fact_id, f.score) for f in r.facts), tuple((e.message_id, e.score) for e in r.events))
              for r in runs}
    assert len(shapes) == 1 and runs[0].facts


def test_time_boost_lifts_the_turn_said_in_the_named_month(retriever: Retriever, store: Store, agent_id: str) -> None:
    """ADR-0021 lever (c): the query names a month; the turn said then outranks a closer
    wording said another month, only with ``time_boost`` on (the default)."""
    march = datetime(2024, 3, 12, tzinfo=UTC)
    store.message(agent_id, "m_july", "Ana cooked a big paella dinner for friends", march + timedelta(days=120))
    store.message(agent_id, "m_march", "Ana cooked dinner", march)
    query = "What did Ana cook for dinner with friends in March 2024?"
    off = retriever.retrieve(agent_id, query, config_overrides={"time_boost": 0.0})
    on = retriever.retrieve(agent_id, query)  # on by default (ADR-0021)
    assert [e.message_id for e in off.events][:1] == ["m_july"]
    assert [e.message_id for e in on.events][:1] == ["m_march"]
    assert on.trace["time_windows"] and "time_windows" not in off.trace


def test_decompose_asks_the_parts_and_keeps_scores_in_range(
    retriever: Retriever, store: Store, agent_id: str
) -> None:
    """ADR-0021 lever (b): a question about two people is also asked once per person."""
    store.message(agent_id, "m_ana", "Ana loves climbing on weekends", T0, speaker="Ana")
    store.message(agent_id, "m_bruno", "Bruno loves chess tournaments", T0 - timedelta(days=30), speaker="Bruno")
    query = "What do Ana and Bruno both love?"
    result = retriever.retrieve(agent_id, query, config_overrides={"decompose": True, "diversity_penalty": 0.3})
    assert result.trace["sub_queries"] == ["What do Ana love?", "What do Bruno love?"]
    assert "decompose" in result.trace["timings_ms"]
    assert {"m_ana", "m_bruno"} <= {e.message_id for e in result.events}
    assert all(0.0 < e.score <= 1.0 for e in result.events)
    plain = retriever.retrieve(agent_id, query)
    assert "decompose" not in plain.trace["timings_ms"]


def test_the_turn_lists_in_one_statement_equal_the_three_statements_before(store: Store, agent_id: str) -> None:
    """``message_lists`` (ADR-0031) folds the nearest turns + their rows, BM25 over the turns
    and the rows BM25 alone found into one statement: the same signals (in the same order),
    rows and BM25 ranking as the three statements it replaced, now and as of a past instant,
    with and without a query vector."""
    texts = ["Bruno ran another marathon with his team", "The weather was grey all week",
             "We ran to the station in the rain", "Ana painted a sunrise over the lake",
             "Bruno and Ana went to Lisbon", "Running shoes are expensive", "I baked bread"]
    for i, text in enumerate(texts):
        store.message(agent_id, f"m{i}", text, T0 - timedelta(days=i), speaker="Bruno" if i % 2 else "Ana")
    cfg = RetrieveConfig().with_overrides({"candidate_pool": 3, "topk_events": 1})
    with store.pool.connection() as conn:
        for query in ("Did Bruno run a marathon?", "rain at the station", "What did Ana paint?", "nothing matches"):
            for as_of in (None, T0 - timedelta(days=3)):
                for qvec in (store.vec(query), None):
                    for exact in (0, 20_000):
                        sig, rows = message_events(conn, agent_id, qvec, [], cfg, 0.0, as_of, exact_rows=exact)
                        found = bm25_messages(conn, agent_id, query, as_of, cfg.candidates.candidate_pool)
                        known = {r[0] for r in rows}
                        rows = rows + message_rows(conn, agent_id, [m for m, _ in found if m not in known], qvec)
                        sig2, rows2, found2 = message_lists(conn, agent_id, qvec, query, cfg, 0.0, as_of, exact)
                        assert list(sig2.items()) == list(sig.items())
                        assert rows2 == rows and found2 == found
                        # BM25 read first, before the vector (ADR-0042): the same lists and rows
                        sig3, rows3, found3 = message_lists(conn, agent_id, qvec, query, cfg, 0.0, as_of, exact,
                                                            bm25_found=found)
                        assert list(sig3.items()) == list(sig.items())
                        assert rows3 == rows and found3 == found
                        if query != "nothing matches" and as_of is None:
                            assert found  # the comparison is not vacuous
