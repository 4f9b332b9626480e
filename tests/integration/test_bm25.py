"""The BM25 signal (services/retrieve/signals/bm25.py) against real PostgreSQL: scores equal
to BM25 computed by hand, the analysis chain (stemming, accent folding, stop words, speaker
and entity names), visibility, IDF, agent isolation, and an older table gaining the columns."""

# ruff: noqa: F811  (pytest fixtures imported from test_retrieve_support)
from __future__ import annotations

import dataclasses
import math
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from test_retrieve_support import T0, Store, create_read_models, store  # noqa: F401

from engramdb.projections.read_models.conversation import MESSAGES
from engramdb.services.retrieve.signals import bm25_facts, bm25_messages

K1, B = 1.5, 0.75


def by_hand(docs: dict[str, list[str]], query: list[str]) -> dict[str, float]:
    """Okapi BM25 with Lucene's IDF over already analysed token lists."""
    n = len(docs)
    avgdl = sum(len(t) for t in docs.values()) / n
    out: dict[str, float] = {}
    for doc_id, tokens in docs.items():
        score = 0.0
        for term in dict.fromkeys(query):
            tf = tokens.count(term)
            if not tf:
                continue
            df = sum(1 for t in docs.values() if term in t)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * len(tokens) / avgdl))
        if score:
            out[doc_id] = score
    return out


def messages(s: Store, agent: str, query: str, as_of: Any = None, limit: int = 10) -> list[tuple[str, float]]:
    with s.pool.connection() as conn:
        return bm25_messages(conn, agent, query, as_of, limit)


def facts(s: Store, agent: str, query: str, as_of: Any = None, minc: float = 0.0,
          limit: int = 10) -> list[tuple[str, float]]:
    with s.pool.connection() as conn:
        return bm25_facts(conn, agent, query, as_of, minc, limit)


def ids(hits: list[tuple[str, float]]) -> list[str]:
    return [h[0] for h in hits]


def test_message_scores_match_bm25_by_hand(store: Store) -> None:
    corpus = {"m1": "cats cat dog", "m2": "dog birds", "m3": "fish", "m4": "bird bird bird cat"}
    for mid, text in corpus.items():
        store.message("a", mid, text, speaker=None)
    analysed = {"m1": ["cat", "cat", "dog"], "m2": ["dog", "bird"], "m3": ["fish"],
                "m4": ["bird", "bird", "bird", "cat"]}
    expected = by_hand(analysed, ["cat", "bird"])
    hits = messages(store, "a", "the cats and a bird")
    assert ids(hits) == sorted(expected, key=lambda d: (-expected[d], d))
    for doc_id, score in hits:
        assert score == pytest.approx(expected[doc_id], abs=1e-6)


def test_fact_scores_match_bm25_by_hand_with_the_entity_name(store: Store) -> None:
    store.fact("a", "f1", "person:ana", "Ana likes green tea")
    store.fact("a", "f2", "person:bruno-almeida", "He drinks tea daily")
    store.fact("a", "f3", "person:ana", "She works at Vertix")
    analysed = {"f1": ["ana", "ana", "like", "green", "tea"],
                "f2": ["bruno", "almeida", "drink", "tea", "daili"],
                "f3": ["ana", "work", "vertix"]}
    expected = by_hand(analysed, ["tea", "almeida"])
    hits = facts(store, "a", "tea Almeida")
    assert ids(hits) == ["f2", "f1"]
    for doc_id, score in hits:
        assert score == pytest.approx(expected[doc_id], abs=1e-6)
    assert ids(facts(store, "a", "ana")) == ["f1", "f3"]  # the entity's name, even when unsaid


def test_stemming_accents_and_stop_words(store: Store) -> None:
    store.message("a", "run", "I was running home", speaker=None)
    store.message("a", "pt", "Você mora em SÃO PAULO?", speaker=None)
    store.message("a", "plain", "voce mora em sao paulo", speaker=None)
    store.message("a", "other", "nothing to see", speaker=None)
    assert ids(messages(store, "a", "runs")) == ["run"]
    assert set(ids(messages(store, "a", "voce sao paulo"))) == {"pt", "plain"}
    accented = messages(store, "a", "você São Paulo")
    assert set(ids(accented)) == {"pt", "plain"}
    assert accented[0][1] == pytest.approx(accented[1][1], abs=1e-9)  # the same document
    assert messages(store, "a", "the and of was to") == []
    assert messages(store, "a", "") == []
    with_stop = messages(store, "a", "the running of the home")
    assert with_stop == messages(store, "a", "running home")


def test_speaker_name_is_searchable(store: Store) -> None:
    store.message("a", "m1", "I love pottery", speaker="Melanie")
    store.message("a", "m2", "I love painting", speaker="Caroline")
    assert ids(messages(store, "a", "what does Melanie love")) == ["m1", "m2"]
    assert ids(messages(store, "a", "Melanie")) == ["m1"]


def test_as_of_visibility(store: Store) -> None:
    store.message("a", "old", "tea ceremony", occurred_at=T0, speaker=None)
    store.message("a", "new", "tea party", occurred_at=T0 + timedelta(days=2), speaker=None)
    assert set(ids(messages(store, "a", "tea"))) == {"old", "new"}
    assert ids(messages(store, "a", "tea", as_of=T0 + timedelta(days=1))) == ["old"]
    # N and df count only the visible rows: alone, 'old' scores as in a one-document corpus
    alone = by_hand({"old": ["tea", "ceremoni"]}, ["tea"])["old"]
    assert messages(store, "a", "tea", as_of=T0 + timedelta(days=1))[0][1] == pytest.approx(alone, abs=1e-6)

    store.fact("a", "f_old", "person:ana", "Ana lives in Recife", valid_from=T0,
               valid_to=T0 + timedelta(days=5), invalidated_at=T0 + timedelta(days=5))
    store.fact("a", "f_new", "person:ana", "Ana lives in Lisbon", valid_from=T0 + timedelta(days=5))
    store.fact("a", "f_weak", "person:ana", "Ana lives in Porto", confidence=0.3)
    assert ids(facts(store, "a", "Recife")) == []
    assert ids(facts(store, "a", "Recife", as_of=T0 + timedelta(days=1))) == ["f_old"]
    assert ids(facts(store, "a", "Porto")) == ["f_weak"]
    assert ids(facts(store, "a", "Porto", minc=0.5)) == []


def test_rare_word_outranks_common_word(store: Store) -> None:
    for i, word in enumerate(["pie", "tart", "cake", "bread"]):
        store.message("a", f"apple{i}", f"apple {word}", speaker=None)
    store.message("a", "zebra", "zebra cake", speaker=None)
    hits = messages(store, "a", "apple zebra")
    assert hits[0][0] == "zebra"
    assert hits[0][1] > hits[1][1]


def test_agent_isolation(store: Store) -> None:
    store.message("a", "m1", "green tea", speaker=None)
    store.message("a", "m2", "black coffee", speaker=None)
    before = messages(store, "a", "tea")
    for i in range(5):
        store.message("b", f"b{i}", "tea tea tea", speaker=None)
    assert messages(store, "a", "tea") == before
    assert ids(messages(store, "b", "green")) == []
    store.fact("a", "fa", "person:ana", "Ana drinks tea")
    store.fact("b", "fb", "person:ana", "Ana drinks tea")
    assert ids(facts(store, "a", "tea")) == ["fa"]


def test_an_older_table_gains_the_search_columns(pg_url: str, fresh_schema: Any) -> None:
    schema, _env = fresh_schema("bm")
    old = dataclasses.replace(MESSAGES, generated=(), functions=(), indexes=())
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(schema)))
        conn.execute(old.create_sql(384))
        conn.execute(
            "INSERT INTO mem_messages (agent_id, message_id, speaker, text, occurred_at, recorded_at, record_id)"
            " VALUES ('a', 'm1', 'Ana', 'Running in São Paulo', %s, %s, gen_random_uuid())", (T0, T0))
    create_read_models(pg_url, schema)
    with psycopg.connect(pg_url, options=f"-c search_path={schema},public") as conn:
        row = conn.execute("SELECT search_tsv::text, search_len FROM mem_messages").fetchone()
        assert row == ("'ana':1 'paulo':5 'run':2 'sao':4", 4)
        assert ids(bm25_messages(conn, "a", "run sao paulo", None, 10)) == ["m1"]


def scored_with(docs: dict[str, list[str]], query: list[str], n: float, avgdl: float) -> dict[str, float]:
    """BM25 as ``by_hand`` but with N and avgdl given (df still counted over ``docs``)."""
    out: dict[str, float] = {}
    for doc_id, tokens in docs.items():
        score = 0.0
        for term in dict.fromkeys(query):
            tf = tokens.count(term)
            if tf:
                df = sum(1 for t in docs.values() if term in t)
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                score += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * len(tokens) / avgdl))
        if score:
            out[doc_id] = score
    return out


def test_a_large_agent_takes_n_and_avgdl_from_the_fixed_hash_sample(store: Store) -> None:
    """ADR-0024: above ``exact_rows`` visible rows, N = 64 x the rows of sample bucket 0 and
    avgdl = their mean length; df stays exact. At or below it, exactly BM25 by hand."""
    shapes = [["tea"], ["tea", "milk"], ["milk", "milk", "tea", "tea", "tea"]]
    analysed = {f"m{i}": shapes[i % 3] for i in range(300)}
    for mid, tokens in analysed.items():
        store.message("a", mid, " ".join(tokens), speaker=None)
    store.message("b", "other", "tea tea milk", speaker=None)  # another agent is not sampled
    with store.pool.connection() as conn:
        sample = [r[0] for r in conn.execute(
            "SELECT message_id FROM mem_messages WHERE agent_id = 'a' AND (hashtext(message_id) & 63) = 0"
        ).fetchall()]
        assert sample, "the fixture's ids must put some rows in bucket 0"
        estimated = bm25_messages(conn, "a", "milk", None, 400, exact_rows=0)
        exact = bm25_messages(conn, "a", "milk", None, 400)  # 300 rows: exact
        assert bm25_messages(conn, "a", "milk", None, 400, exact_rows=64 * len(sample)) == exact
    n = 64.0 * len(sample)
    avgdl = sum(len(analysed[m]) for m in sample) / len(sample)
    want = scored_with(analysed, ["milk"], n, avgdl)
    assert ids(estimated) == sorted(want, key=lambda d: (-want[d], d))
    for doc_id, score in estimated:
        assert score == pytest.approx(want[doc_id], abs=1e-6)
    truth = by_hand(analysed, ["milk"])
    for doc_id, score in exact:
        assert score == pytest.approx(truth[doc_id], abs=1e-6)
    assert estimated != exact  # the estimate was used, not the count


def test_sampled_facts_keep_the_visibility_filter(store: Store) -> None:
    """The sample counts only facts the exact statistics would count (active, confident)."""
    for i in range(200):
        store.fact("a", f"f{i}", "person:ana", "likes tea", confidence=0.3 if i % 2 else 0.9)
    with store.pool.connection() as conn:
        bucket = {r[0] for r in conn.execute(
            "SELECT fact_id FROM mem_facts WHERE agent_id = 'a' AND (hashtext(fact_id) & 63) = 0").fetchall()}
        visible = [f for f in bucket if int(f[1:]) % 2 == 0]
        assert visible, "the fixture's ids must put a confident fact in bucket 0"
        hits = bm25_facts(conn, "a", "tea", None, 0.5, 200, exact_rows=0)
    docs = {f"f{i}": ["ana", "like", "tea"] for i in range(0, 200, 2)}
    want = scored_with(docs, ["tea"], 64.0 * len(visible), 3.0)
    assert len(hits) == 100
    for doc_id, score in hits:
        assert score == pytest.approx(want[doc_id], abs=1e-6)


def test_a_narrowing_picks_rows_and_leaves_their_scores_alone(store: Store) -> None:
    """A session / metadata narrowing (ADR-0047) returns only the rows that pass it, each with
    the score it has unnarrowed (the agent's N, avgdl and df), best first, up to the limit —
    as a filter clause in Lucene leaves the IDF alone. Broad (probe per scored row) and
    selective (the listed fact ids) forms give the same rows."""
    from engramdb.services.retrieve.scope import RetrieveFilter, narrowing
    from engramdb.services.retrieve.signals.shared import Narrowing

    for i in range(12):
        session = "s-home" if i % 3 == 0 else "s-work"
        store.message("a", f"m{i:02d}", "tea " * (1 + i % 4) + f"note {i}", session_id=session)
        store.fact("a", f"f{i:02d}", "person:ana", "tea " * (1 + i % 4) + f"fact {i}",
                   source_message_id=f"m{i:02d}")
    home = {f"m{i:02d}" for i in range(0, 12, 3)}
    broad = narrowing(RetrieveFilter.of("s-home"), fact_copy=False)
    copied = narrowing(RetrieveFilter.of("s-home"))
    assert broad is not None and not broad.selective and copied is not None and copied.copied
    listed = Narrowing(broad.turn_sql, {**broad.params, "nwf": [f"f{m[1:]}" for m in home]}, True)
    with store.pool.connection() as conn:
        # the rows were written here, not projected: the facts' copy of their turns' scope as
        # the memory projector keeps it (ADR-0047)
        conn.execute("UPDATE mem_facts f SET source_scope = (SELECT jsonb_agg(jsonb_build_object("
                     "'s', m.session_id, 'm', m.metadata)) FROM mem_messages m WHERE m.agent_id = f.agent_id"
                     " AND m.message_id = ANY(f.source_message_ids)) WHERE f.agent_id = 'a'")
        all_turns = dict(bm25_messages(conn, "a", "tea", None, 100))
        all_facts = dict(bm25_facts(conn, "a", "tea", None, 0.0, 100))
        turns = bm25_messages(conn, "a", "tea", None, 3, scope=broad)
        by_probe = bm25_facts(conn, "a", "tea", None, 0.0, 3, scope=broad)
        by_list = bm25_facts(conn, "a", "tea", None, 0.0, 3, scope=listed)
        by_copy = bm25_facts(conn, "a", "tea", None, 0.0, 3, scope=copied)
    assert by_copy == by_probe
    want_turns = sorted(home, key=lambda m: (-all_turns[m], m))[:3]
    assert ids(turns) == want_turns
    for doc_id, score in turns:
        assert score == pytest.approx(all_turns[doc_id], abs=1e-9)
    want_facts = sorted((f"f{m[1:]}" for m in home), key=lambda f: (-all_facts[f], f))[:3]
    assert ids(by_probe) == ids(by_list) == want_facts
    for doc_id, score in by_probe:
        assert score == pytest.approx(all_facts[doc_id], abs=1e-9)
