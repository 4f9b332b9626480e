"""The subject sweep (ADR-0025): pure parts (who the question is about, the question without
the name, the list-question gate, the per-session cap) and, against real PostgreSQL +
pgvector, that it brings a person's fact that shares no word with the question but the name.
"""

# ruff: noqa: F811  (pytest fixtures imported from test_retrieve_support)
from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from test_retrieve_support import T0, Store, store  # noqa: F401  (fixtures)

from engramdb.infra.pgsql import vector_literal
from engramdb.infra.providers.scripted import HashEmbedder, bow_tokens
from engramdb.infra.read_pool import open_worker_pool
from engramdb.services.retrieve import Retriever, signals, subject_sweep
from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.models import PlannedEntity, RetrievalPlan
from engramdb.services.retrieve.planner import analyze_query, build_plan, load_lookup, load_names
from engramdb.services.retrieve.subject_sweep import (
    cap_per_group,
    interleave,
    is_list_question,
    named_plan,
    one_pronoun,
    subject_of,
    sweep,
    without_names,
)


@pytest.mark.parametrize("query", [
    "What activities has Melanie done with her family?",
    "Which geographical locations has Tim been to?",
    "What European countries has Maria been to?",
    "How many children does Melanie have?",
    "What kind of interests do Joanna and Nate share?",
    "What has Melanie painted?",
    "What do Jon and Gina both have in common?",
    "Quais cidades a Rita visitou?",
])
def test_list_questions(query: str) -> None:
    assert is_list_question(query)


@pytest.mark.parametrize("query", [
    "What is Caroline's identity?",
    "Where did Caroline move from 4 years ago?",
    "When did Melanie paint a sunrise?",
    "What does Melanie do to destress?",
])
def test_single_answer_questions_are_not_list_questions(query: str) -> None:
    assert not is_list_question(query)


def test_without_names_keeps_the_sentence_shape() -> None:
    assert without_names("What do Melanie's kids like?", ["Melanie"]) == "What do their kids like?"
    assert without_names("Which places has Tim been to?", ["Tim", "tim"]) == "Which places has they been to?"
    assert without_names("What did Marcos Tavares build?", ["Marcos Tavares"]) == "What did they build?"
    assert without_names("Timothy and Tim", ["Tim"]) == "Timothy and they"  # whole words only


def _plan(*entities: PlannedEntity) -> RetrievalPlan:
    return RetrievalPlan(similarity_query="q", entities=list(entities))


def test_subject_of_needs_one_or_two_named_entities_and_for_list_scope_a_list_question() -> None:
    tim = PlannedEntity(entity_key="person:tim", display_name="Tim", source="deterministic", matched="tim", in_query=True)
    ana = PlannedEntity(entity_key="person:ana", display_name="Ana", source="deterministic", matched="ana", in_query=True)
    bob = PlannedEntity(entity_key="person:bob", display_name="Bob", source="deterministic", matched="bob", in_query=True)
    near = PlannedEntity(entity_key="person:zoe", display_name="Zoe", source="expansion", matched="person:tim")
    subject = subject_of("Which places has Tim been to?", _plan(tim, near), "list")
    assert subject is not None
    assert subject.entity_keys == ("person:tim",) and subject.speakers == ("tim",)
    assert subject.stripped_query == "Which places has they been to?"
    assert subject_of("Where does Tim live?", _plan(tim), "list") is None  # not a list question
    assert subject_of("Where does Tim live?", _plan(tim), "any") is not None
    assert subject_of("Which places has nobody been to?", _plan(near), "any") is None  # expansion only
    assert subject_of("What do Tim, Ana and Bob share?", _plan(tim, ana, bob), "any") is None
    assert subject_of("What do Tim and Ana both like?", _plan(tim, ana), "list") is not None


def test_subject_of_keeps_each_person_apart_for_the_per_person_sweep() -> None:
    tim = PlannedEntity(entity_key="person:tim", display_name="Tim", source="deterministic", matched="tim", in_query=True)
    ana = PlannedEntity(entity_key="person:ana", display_name="Ana", source="deterministic", matched="ana", in_query=True)
    subject = subject_of("What movies have both Tim and Ana seen?", _plan(tim, ana), "any")
    assert subject is not None
    assert subject.people == (("person:tim", ("tim",)), ("person:ana", ("ana",)))


def test_pair_as_one_reads_two_names_as_one_plural_subject() -> None:
    assert one_pronoun("What movies have both they and they seen?") == "What movies have both they seen?"
    assert one_pronoun("Who is they and their favorite player?") == "Who is their favorite player?"
    assert one_pronoun("What has they recommended to they?") == "What has they recommended to they?"
    tim = PlannedEntity(entity_key="person:tim", display_name="Tim", source="deterministic", matched="tim", in_query=True)
    ana = PlannedEntity(entity_key="person:ana", display_name="Ana", source="deterministic", matched="ana", in_query=True)
    query = "What movies have both Tim and Ana seen?"
    plain, paired = subject_of(query, _plan(tim, ana), "any"), subject_of(query, _plan(tim, ana), "any", True)
    assert plain is not None and plain.stripped_query == "What movies have both they and they seen?"
    assert paired is not None and paired.stripped_query == "What movies have both they seen?"


def test_interleave_takes_each_list_in_turn_without_repeats() -> None:
    assert interleave([["a", "b", "c"], ["x", "a", "y"]]) == ["a", "x", "b", "c", "y"]
    assert interleave([["a"], []]) == ["a"] and interleave([]) == []


def test_cap_per_group() -> None:
    ranked = [("a", 1), ("b", 1), ("c", 1), ("d", 2), ("e", 1), ("f", 2)]
    assert cap_per_group(ranked, 0) == ["a", "b", "c", "d", "e", "f"]
    assert cap_per_group(ranked, 2) == ["a", "b", "d", "f"]


def test_sweep_is_on_by_default_as_cross_validated_and_bounded() -> None:
    # the default is the grid's `sweep-any-all`, chosen in every fold in both LoCoMo modes (ADR-0025)
    cfg = RetrieveConfig()
    assert cfg.fusion.rrf_weights["fact_subject"] == 1.0 and cfg.fusion.rrf_weights["message_subject"] == 1.0
    assert not cfg.sweeps.subject_sweep_only_subject and cfg.sweeps.subject_sweep_scope == "any"
    with pytest.raises(ValueError):
        cfg.with_overrides({"subject_sweep_scope": "everything"})
    with pytest.raises(ValueError):
        cfg.with_overrides({"subject_sweep_per_session": -1})
    # the per-person lists (ADR-0034): `person-list-0.5-tail10`, chosen in every fold (LOCO-CV)
    assert cfg.fusion.rrf_weights["fact_person"] == 0.5 and cfg.fusion.rrf_weights["message_person"] == 0.5
    assert cfg.sweeps.person_lists_from == 10 and cfg.sweeps.person_sweep_scope == "list"


# ----------------------------------------------------------------------------- end to end

# A toy *semantic* embedder: HashEmbedder's bag of words, where a few words of one meaning
# (travel) share one token. It stands in for a real model's "places" ~ "London" closeness,
# which a bag of words cannot have; deterministic, and every other word is only itself.
_CONCEPTS = {"places": "travel", "place": "travel", "london": "travel", "trip": "travel"}


class ConceptEmbedder(HashEmbedder):
    def _vector(self, text: str) -> list[float]:
        tokens = [_CONCEPTS.get(t, t) for t in bow_tokens(text)]
        return super()._vector(" ".join(tokens))


EMBEDDER = ConceptEmbedder(384)


@pytest.fixture
def concept_store(store: Store) -> Store:
    return Store(store.pool, store.schema, embedder=EMBEDDER)


@pytest.fixture
def concept_retriever(concept_store: Store) -> Iterator[Retriever]:
    with Retriever(concept_store.pool, EMBEDDER) as r:
        yield r


# pinned, not the defaults: these tests show each variant's behaviour, whatever the default is
SWEEP = {"rrf_weights": {"fact_subject": 1.0, "message_subject": 1.0},
         "subject_sweep_scope": "list", "subject_sweep_only_subject": True}
NO_SWEEP = {"rrf_weights": {"fact_subject": 0.0, "message_subject": 0.0, "fact_person": 0.0, "message_person": 0.0}}


def test_the_sweep_brings_the_subjects_fact_that_shares_only_the_name(
    concept_retriever: Retriever, concept_store: Store, agent_id: str
) -> None:
    s = concept_store
    s.entity(agent_id, "person:tim", "Tim")
    s.entity(agent_id, "person:ana", "Ana")
    for i, word in enumerate(["naps", "cooks", "reads", "swims", "runs", "sings"]):
        s.fact(agent_id, f"f_{word}", "person:tim", f"Tim {word}.", valid_from=T0 - timedelta(days=i))
    # the evidence: about Tim, a place, and no word of the question but his name
    evidence = "Tim spent a long rainy week in London with old school friends"
    s.fact(agent_id, "f_london", "person:tim", evidence, valid_from=T0 - timedelta(days=30))
    s.fact(agent_id, "f_ana_trip", "person:ana", "Ana planned a trip", valid_from=T0)
    query = "Which places has Tim been to?"
    # the question's words: the name dominates, every short fact of Tim is nearer than the evidence
    q, short, ev = (EMBEDDER.embed_query(t) for t in (query, "Tim naps.", evidence))
    assert sum(a * b for a, b in zip(q, short, strict=True)) > sum(a * b for a, b in zip(q, ev, strict=True))
    small = {"candidate_pool": 4, "enable_reranker": False}
    off = concept_retriever.retrieve(agent_id, query, config_overrides={**small, **NO_SWEEP})
    assert "f_london" not in [f.fact_id for f in off.facts]
    assert "subject_sweep" not in off.trace.get("timings_ms", {})
    on = concept_retriever.retrieve(agent_id, query, config_overrides={**small, **SWEEP})
    found = {f.fact_id: f for f in on.facts}
    assert "f_london" in found and found["f_london"].scores["rank_fact_subject"] == 1.0
    assert "f_ana_trip" not in found or "rank_fact_subject" not in found["f_ana_trip"].scores  # Tim's only
    assert on.trace["subject_sweep"]["query"] == "Which places has they been to?"
    assert all(0.0 < f.score <= 1.0 for f in on.facts)


def test_the_sweep_brings_the_subjects_own_turn_and_not_the_other_speakers(
    concept_retriever: Retriever, concept_store: Store, agent_id: str
) -> None:
    s = concept_store
    s.entity(agent_id, "person:tim", "Tim")
    for i, word in enumerate(["hello", "thanks", "sure", "great", "cool", "bye"]):
        s.message(agent_id, f"m_{word}", f"{word}!", T0 - timedelta(minutes=i), speaker="Tim")
    s.message(agent_id, "m_london", "I spent a long rainy week in London with old school friends",
              T0 - timedelta(days=3), speaker="Tim")
    s.message(agent_id, "m_ana", "My trip was lovely", T0 - timedelta(days=2), speaker="Ana")
    small = {"candidate_pool": 4, "enable_reranker": False, "topk_events": 20}
    on = concept_retriever.retrieve(agent_id, "Which places has Tim been to?", config_overrides={**small, **SWEEP})
    ranks = {e.message_id: e.scores.get("rank_message_subject") for e in on.events}
    assert ranks.get("m_london") == 1.0
    assert ranks.get("m_ana") is None  # Ana's turn is not Tim's: not in the sweep
    # unrestricted (subject_sweep_only_subject false): the name-less question ranks every turn
    everyone = concept_retriever.retrieve(agent_id, "Which places has Tim been to?",
                                          config_overrides={**small, **SWEEP, "subject_sweep_only_subject": False})
    ranks_all = {e.message_id: e.scores.get("rank_message_subject") for e in everyone.events}
    assert ranks_all.get("m_ana") is not None and ranks_all.get("m_london") is not None
    # same query, same memory, same answer
    again = concept_retriever.retrieve(agent_id, "Which places has Tim been to?", config_overrides={**small, **SWEEP})
    assert [(e.message_id, e.score) for e in again.events] == [(e.message_id, e.score) for e in on.events]


def test_the_person_sweep_gives_each_named_person_a_share_of_the_top(
    concept_retriever: Retriever, concept_store: Store, agent_id: str
) -> None:
    """Tim says much about travel, Ana little: one ranking over both fills with Tim, one list
    per person taken in turn puts Ana's one trip fact second."""
    s = concept_store
    s.entity(agent_id, "person:tim", "Tim")
    s.entity(agent_id, "person:ana", "Ana")
    for i in range(4):
        s.fact(agent_id, f"f_tim_{i}", "person:tim", f"Tim took a trip to London number {i}",
               valid_from=T0 - timedelta(days=i))
    s.fact(agent_id, "f_ana", "person:ana", "Ana went on a long trip with her sister", valid_from=T0)
    query = "Which places have Tim and Ana both been to?"
    small = {"candidate_pool": 4, "enable_reranker": False}
    person = {"rrf_weights": {"fact_subject": 0.0, "message_subject": 0.0, "fact_person": 1.0,
                              "message_person": 1.0}, "person_lists_from": 0}
    on = concept_retriever.retrieve(agent_id, query, config_overrides={**small, **person})
    ranks = {f.fact_id: f.scores.get("rank_fact_person") for f in on.facts}
    assert ranks["f_ana"] in (1.0, 2.0)  # first or second: one of the two persons' first facts
    assert sorted(r for r in ranks.values() if r is not None)[:2] == [1.0, 2.0]
    assert on.trace["candidates"]["person_facts"] >= 2
    off = concept_retriever.retrieve(agent_id, query, config_overrides={**small, **NO_SWEEP})
    assert all("rank_fact_person" not in f.scores for f in off.facts)  # weight 0: not run


def test_the_per_person_sweep_gives_each_named_person_a_turn_at_the_top(
    concept_retriever: Retriever, concept_store: Store, agent_id: str
) -> None:
    """ADR-0034: a question about two people; Tim says far more about travel than Ana, so
    one ranking over both fills with Tim. The per-person lists take each person in turn."""
    s = concept_store
    s.entity(agent_id, "person:tim", "Tim")
    s.entity(agent_id, "person:ana", "Ana")
    for i in range(4):
        s.message(agent_id, f"m_tim{i}", f"London trip place number {i}", T0 - timedelta(days=i), speaker="Tim")
    s.message(agent_id, "m_ana", "I loved our week in Porto, a lovely place", T0 - timedelta(days=9), speaker="Ana")
    s.message(agent_id, "m_bob", "London trip places", T0 - timedelta(days=1), speaker="Bob")
    query = "Which places have both Tim and Ana been to?"
    base = {"candidate_pool": 6, "enable_reranker": False, "topk_events": 20,
            "rrf_weights": {"fact_subject": 0.0, "message_subject": 0.0, "fact_person": 1.0, "message_person": 1.0},
            "person_lists_from": 0, "person_sweep_scope": "list"}
    on = concept_retriever.retrieve(agent_id, query, config_overrides=base)
    ranks = {e.message_id: e.scores.get("rank_message_person") for e in on.events}
    assert ranks.get("m_tim0") == 1.0 and ranks.get("m_ana") == 2.0  # Tim's best, then Ana's
    assert ranks.get("m_bob") is None  # neither named person said it
    assert on.trace["candidates"]["person_messages"] >= 2
    # scope "list" (the default) runs it only for questions asking for several things
    single = concept_retriever.retrieve(agent_id, "Where did Tim and Ana meet?", config_overrides=base)
    assert single.trace["candidates"].get("person_messages", 0) == 0
    anyq = concept_retriever.retrieve(agent_id, "Where did Tim and Ana meet?",
                                      config_overrides={**base, "person_sweep_scope": "any"})
    assert anyq.trace["candidates"]["person_messages"] >= 2


@pytest.mark.parametrize("query", [
    "Which places has Tim been to?",
    "What did Timothy's sister paint?",
    "What do Tim and Ana both like?",
    "What do Tim, Ana and Zoe share?",
    "Where does Ana live?",
    "How many projects does nobody run?",
])
def test_the_names_alone_find_the_subject_the_whole_plan_finds(
    concept_store: Store, agent_id: str, query: str
) -> None:
    """The sweep's name-less question is embedded right after the name lookup, beside the
    question's own embedding (ADR-0031), no longer after the whole plan: the subject read
    from the names alone must be the one the whole plan (expansion, communities, type
    prefixes) gives, so the swept lists — and the ranking — cannot change."""
    s = concept_store
    s.entity(agent_id, "person:tim", "Tim", aliases=["Timothy"])
    s.entity(agent_id, "person:ana", "Ana")
    s.entity(agent_id, "person:zoe", "Zoe")
    s.entity(agent_id, "project:atlas", "Atlas")
    s.relationship(agent_id, "person:tim", "person:zoe", "sibling_of")
    s.relationship(agent_id, "person:ana", "project:atlas", "works_on")
    analysis = analyze_query(query)
    with s.pool.connection() as conn:
        names = load_names(conn, agent_id, analysis)
        lookup = load_lookup(conn, agent_id, analysis, None, communities=True)
    whole = build_plan(analysis, lookup)
    assert lookup.names == names
    for scope in ("any", "list"):
        assert subject_of(query, named_plan(analysis, names), scope) == subject_of(query, whole, scope)
    named = "nobody" not in query and "Zoe" not in query  # none, or three: no subject
    assert (subject_of(query, whole, "any") is not None) == named
    if named:
        assert any(e.source == "expansion" for e in whole.entities)  # the whole plan has more


# The same, for the name lookup's other paths: an alias, a merged entity, the entity scan
# taken when no alias row matches (ADR-0031).

SUBJECT_QUERIES = [
    "Which places has Tim been to?",
    "What do Tim and Ana both like?",  # two subjects
    "What do Tim, Ana and Zoe share?",  # three: no sweep
    "Where did Timmy go last summer?",  # an alias
    "What has Carla Dias built?",  # merged into another entity
    "Which books has acme published?",  # found by the entity scan (no alias row matches)
    "Where does Zoe live?",  # Zoe is also Tim's neighbour (expansion) in other questions
    "What is the weather like?",  # nobody
]


@pytest.mark.parametrize("scope", ["list", "any"])
def test_the_subject_from_the_name_lookup_is_the_full_plans(
    store: Store, agent_id: str, scope: str
) -> None:
    s = store
    s.entity(agent_id, "person:tim", "Tim", aliases=["Timmy"])
    s.entity(agent_id, "person:ana", "Ana")
    s.entity(agent_id, "person:zoe", "Zoe")
    s.entity(agent_id, "person:carla", "Carla")
    s.entity(agent_id, "person:carla-dias", "Carla Dias", merged_into="person:carla")
    s.relationship(agent_id, "person:tim", "person:zoe", "friend_of")
    s.relationship(agent_id, "person:ana", "person:zoe", "sister_of")
    with s.pool.connection() as conn:  # an entity without an alias row (older data)
        conn.execute("INSERT INTO mem_entities (agent_id, entity_key, display_name, entity_type, created_at)"
                     " VALUES (%s, 'organization:acme', 'Acme', 'organization', %s)", (agent_id, T0))
    found = 0
    with s.pool.connection() as conn:
        for query in SUBJECT_QUERIES:
            analysis = analyze_query(query)
            full = build_plan(analysis, load_lookup(conn, agent_id, analysis, None))
            early = named_plan(analysis, load_names(conn, agent_id, analysis))
            assert subject_of(query, early, scope) == subject_of(query, full, scope), query
            found += subject_of(query, full, scope) is not None
    assert found >= 3  # the comparison is not vacuous


def test_the_sweep_ranks_what_a_sweep_by_the_full_plans_subject_ranks(
    concept_retriever: Retriever, concept_store: Store, agent_id: str
) -> None:
    """End to end, the default config (the sweep over every unit): each returned unit's
    subject rank is its rank in ``sweep`` run with the subject of the full plan (the path
    before ADR-0031), and the same call twice gives the same answer."""
    s = concept_store
    s.entity(agent_id, "person:tim", "Tim", aliases=["Timmy"])
    s.entity(agent_id, "person:zoe", "Zoe")
    s.relationship(agent_id, "person:tim", "person:zoe", "friend_of")
    for i, text in enumerate(["Tim naps.", "Tim went to London.", "Zoe likes trips.", "Tim cooks pasta.",
                              "Ana's place is big.", "Tim visited Porto last year."]):
        key = "person:zoe" if text.startswith("Zoe") else "person:tim"
        s.fact(agent_id, f"f{i}", key, text, valid_from=T0 - timedelta(days=i))
        s.message(agent_id, f"m{i}", text.replace("Tim ", "I "), T0 - timedelta(hours=i), speaker="Tim")
    query = "Which places has Timmy been to?"
    cfg = {"enable_reranker": False, "topk_events": 20, "topk_facts": 20}
    result = concept_retriever.retrieve(agent_id, query, config_overrides=cfg)
    assert result.trace["subject_sweep"]["query"] == "Which places has they been to?"
    analysis = analyze_query(query)
    with s.pool.connection() as conn:
        plan = build_plan(analysis, load_lookup(conn, agent_id, analysis, None))
        subject = subject_of(query, plan, RetrieveConfig().sweeps.subject_sweep_scope)
        assert subject is not None
        c = RetrieveConfig().with_overrides(cfg)
        direct = sweep(conn, agent_id, subject, vector_literal(EMBEDDER.embed_query(subject.stripped_query)),
                       as_of=None, min_confidence=c.filters.min_confidence, limit=c.candidates.candidate_pool,
                       ef_search=c.candidates.hnsw_ef_search, per_session=c.sweeps.subject_sweep_per_session,
                       only_subject=c.sweeps.subject_sweep_only_subject)
    fact_ranks = {f.fact_id: f.scores["rank_fact_subject"] for f in result.facts if "rank_fact_subject" in f.scores}
    turn_ranks = {e.message_id: e.scores["rank_message_subject"] for e in result.events
                  if "rank_message_subject" in e.scores}
    assert fact_ranks and turn_ranks
    assert fact_ranks == {f: float(i + 1) for i, f in enumerate(direct.fact_ids) if f in fact_ranks}
    assert turn_ranks == {m: float(i + 1) for i, m in enumerate(direct.message_ids) if m in turn_ranks}
    again = concept_retriever.retrieve(agent_id, query, config_overrides=cfg)
    assert [(f.fact_id, f.score) for f in again.facts] == [(f.fact_id, f.score) for f in result.facts]
    assert [(e.message_id, e.score) for e in again.events] == [(e.message_id, e.score) for e in result.events]


def test_the_sweep_on_a_worker_answers_as_on_the_request_connection(
    concept_store: Store, pg_url: str, agent_id: str
) -> None:
    """ADR-0038: with database workers the sweep's statements run on a worker as soon as its
    vector is there; the lists, ranks and rows are those of the sweep run after the plan on
    the request's connection — subject sweep and per-person sweep, facts and turns."""
    s = concept_store
    s.entity(agent_id, "person:tim", "Tim")
    s.entity(agent_id, "person:ana", "Ana")
    for i, text in enumerate(["Tim went to London.", "Tim cooks pasta.", "Ana went on a trip to Porto.",
                              "Ana paints sunsets.", "Tim visited Rome last year."]):
        key = "person:ana" if text.startswith("Ana") else "person:tim"
        s.fact(agent_id, f"f{i}", key, text, valid_from=T0 - timedelta(days=i))
        s.message(agent_id, f"m{i}", text, T0 - timedelta(hours=i), speaker=text.split()[0])
    workers = open_worker_pool(pg_url, s.schema)
    try:
        with Retriever(s.pool, EMBEDDER) as inline, Retriever(s.pool, EMBEDDER, worker_pool=workers) as beside:
            overrides = {"person_sweep_scope": "any", "person_lists_from": 0, "topk_events": 20}
            for query in ("Which places has Tim been to?", "Which places have Tim and Ana both been to?"):
                a = inline.retrieve(agent_id, query, config_overrides=overrides)
                b = beside.retrieve(agent_id, query, config_overrides=overrides)
                assert [f.model_dump() for f in b.facts] == [f.model_dump() for f in a.facts]
                assert [e.model_dump() for e in b.events] == [e.model_dump() for e in a.events]
                assert b.trace["candidates"] == a.trace["candidates"] and a.trace["candidates"]["person_facts"]
                assert {"embed_subject", "subject_sweep"} <= set(b.trace["timings_ms"])
    finally:
        workers.close()


class HeldQuestionEmbedder(ConceptEmbedder):
    """TEST DOUBLE: ``ConceptEmbedder``, except that the embedding of ``held`` (the question
    itself) waits until ``release`` is set — as if the longer text were still being embedded."""

    def __init__(self, held: str, release: threading.Event) -> None:
        super().__init__(384)
        self.held, self.release = held, release
        self.released_in_time = True

    def embed_query(self, text: str) -> list[float]:
        if text == self.held:
            self.released_in_time = self.release.wait(timeout=20)
        return super().embed_query(text)


def test_the_sweep_and_the_turns_bm25_do_not_wait_for_the_questions_vector(
    concept_store: Store, pg_url: str, agent_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ADR-0042: the sweep's statements need only the name-less question's vector and BM25 over
    the turns needs none, so with database workers both run while the question is still being
    embedded. The question's embedding here is held until both have run: were either to wait
    for the question's vector, the call would wait out the 20 s timeout. Same answer as a
    retriever whose embedding is not held."""
    s = concept_store
    s.entity(agent_id, "person:tim", "Tim")
    for i, text in enumerate(["Tim went to London.", "Tim cooks pasta.", "Tim visited Rome last year."]):
        s.fact(agent_id, f"f{i}", "person:tim", text, valid_from=T0 - timedelta(days=i))
        s.message(agent_id, f"m{i}", text, T0 - timedelta(hours=i), speaker="Tim")
    query = "Which places has Tim been to?"
    ran: set[str] = set()
    release = threading.Event()

    def seen(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            ran.add(name)
            if ran >= {"sweep", "turns_bm25"}:
                release.set()
            return out
        return wrapper

    monkeypatch.setattr(subject_sweep, "sweep", seen("sweep", subject_sweep.sweep))
    monkeypatch.setattr(signals, "bm25_messages", seen("turns_bm25", signals.bm25_messages))
    held = HeldQuestionEmbedder(query, release)
    workers = open_worker_pool(pg_url, s.schema)
    try:
        with Retriever(s.pool, held, worker_pool=workers) as beside, Retriever(
                s.pool, EMBEDDER, worker_pool=workers) as plain:
            result = beside.retrieve(agent_id, query)
            assert held.released_in_time, "a statement waited for the question's vector"
            expected = plain.retrieve(agent_id, query)
    finally:
        workers.close()
    assert [f.fact_id for f in result.facts] == [f.fact_id for f in expected.facts]
    assert [e.message_id for e in result.events] == [e.message_id for e in expected.events]
    assert result.trace["candidates"]["subject_facts"] > 0 and result.facts
