"""Pure parts of the read pipeline: planner, config overrides, formatter, reranker parsing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from engramdb.services.retrieve import RetrieveConfig, UnknownConfigKey
from engramdb.services.retrieve.formatter import count_tokens, format_context
from engramdb.services.retrieve.planner import (
    Edge,
    PlannerLookup,
    analyze_query,
    build_plan,
    sanitize_query,
)
from engramdb.services.retrieve.rerank import RerankFailed, blend, build_messages, parse_scores
from engramdb.services.retrieve.signals import escape_like, keyword_words


@pytest.mark.parametrize(
    "query", ["hi", "Hello!", "hey there", "oi", "Olá", "bom dia", "Boa noite, pessoal", "e aí", "E aí, tudo bem?",
              "thanks", "thank you!", "obrigado", "valeu", "ok", "tchau"],
)
def test_greetings_skip(query: str) -> None:
    plan = build_plan(analyze_query(query), None)
    assert plan.strategy == "skip" and plan.reason == "greeting"


@pytest.mark.parametrize(
    "query", ["hi, where does Marcos live?", "bom dia, onde o Carlos mora?", "thanks for telling me about Vertix",
              "Oi Marcos Tavares mudou?", "what is my dog's name"],
)
def test_questions_are_not_greetings(query: str) -> None:
    assert build_plan(analyze_query(query), None).strategy == "multi_signal"


def test_aggregation_only_for_existing_prefixes() -> None:
    for query in ("who are my friends?", "quais são meus amigos?", "list all people I know", "quem são minhas amigas"):
        analysis = analyze_query(query)
        assert "person" in analysis.aggregation_prefixes
        plan = build_plan(analysis, PlannerLookup(prefixes={"person"}))
        assert plan.pattern_queries == ["person:%"] and plan.reason == "aggregation"
        assert build_plan(analysis, PlannerLookup(prefixes=set())).pattern_queries == []
    plan = build_plan(analyze_query("list all companies"), PlannerLookup(prefixes={"organization", "person"}))
    assert plan.pattern_queries == ["organization:%"]
    assert analyze_query("where does Marcos live").aggregation_prefixes == ()


@pytest.mark.parametrize("query", ["tell me everything about Marcos", "Me conte tudo sobre a Vertix",
                                   "what do you know about Carolina?", "o que você sabe sobre o Bruno"])
def test_broad_queries(query: str) -> None:
    plan = build_plan(analyze_query(query), PlannerLookup())
    assert plan.broad_query and plan.reason == "broad" and plan.similarity_query == sanitize_query(query, 2000)


def test_entity_resolution_longest_match_and_expansion() -> None:
    analysis = analyze_query("Onde o Marcos Tavares mora?")
    lookup = PlannerLookup(
        names={"marcos tavares": [("person:marcos-tavares", "Marcos Tavares")], "marcos": [("person:marcos", "Marcos")]},
        edges=[Edge("person:marcos-tavares", "person:carolina", "married_to", 2.0, None),
               Edge("person:marcos-tavares", "organization:vertix", "works_at", 1.0, None),
               Edge("person:marcos", "person:x", "knows", 9.0, None)],
        display_names={"person:carolina": "Carolina"},
    )
    plan = build_plan(analysis, lookup, expansion_limit=1)
    assert [(e.entity_key, e.source) for e in plan.entities] == [
        ("person:marcos-tavares", "deterministic"), ("person:carolina", "expansion")]
    assert plan.entities[0].in_query and not plan.entities[1].in_query
    assert plan.entities[1].display_name == "Carolina"
    assert build_plan(analysis, lookup) == build_plan(analysis, lookup)  # pure & deterministic


def test_ngrams_skip_stopwords() -> None:
    grams = {text for _, _, text in analyze_query("What happened with the Vertix deal?").ngrams}
    assert "vertix" in grams and "vertix deal" in grams and "the" not in grams and "the vertix" not in grams


def test_sanitize_query() -> None:
    assert sanitize_query("a\x00b\tc\n", 100) == "a b c"
    assert sanitize_query("\ud800x", 100) == "?x"
    long = sanitize_query("word " * 50_000, 2000)
    assert len(long) <= 2000 and long.endswith("word")


def test_keyword_words_and_escaping() -> None:
    assert keyword_words("Where does Marcos Tavares live?", 5, 3) == ["marcos", "tavares", "live"]
    assert keyword_words("a b cd efg hij klm nop qrs tuv", 5, 3) == ["efg", "hij", "klm", "nop", "qrs"]
    assert keyword_words("Vitória Paulo vitória", 5, 3) == ["vitória", "paulo"]
    assert escape_like("100%_a\\b") == "100\\%\\_a\\\\b"


def test_config_overrides() -> None:
    base = RetrieveConfig()
    assert (base.sizes.topk_facts, base.sizes.topk_events, base.filters.min_confidence, base.filters.min_similarity) == (20, 8, 0.55, 0.20)
    assert base.scoring.score_weights == {"semantic": 0.70, "recency": 0.20, "importance": 0.10}
    assert (base.scoring.recency_half_life_days, base.spreading.spreading_activation_hops, base.spreading.spreading_decay_factor) == (14, 2, 0.5)
    assert (base.spreading.spreading_facts_per_entity, base.spreading.spreading_max_related_entities) == (3, 5)
    assert (base.rerank.enable_reranker, base.rerank.reranker_weight, base.rerank.min_reranker_score, base.rerank.reranker_timeout_sec) == (False, 0.7, 0.1, 5.0)
    assert (base.filters.min_score, base.context.context_max_tokens, base.context.hot_tier_ratio, base.context.warm_tier_ratio) == (0.15, 2000, 0.5, 0.3)
    cfg = base.with_overrides({"topk_facts": 3, "score_weights": {"recency": 0.0}})
    assert cfg.sizes.topk_facts == 3 and cfg.scoring.score_weights == {"semantic": 0.7, "recency": 0.0, "importance": 0.1}
    assert base.sizes.topk_facts == 20  # the base is untouched
    with pytest.raises(UnknownConfigKey, match="'topk_fact'"):
        base.with_overrides({"topk_fact": 3})
    with pytest.raises(ValidationError, match="min_score"):
        base.with_overrides({"min_score": 2})
    with pytest.raises(ValidationError, match="topk_facts"):
        base.with_overrides({"topk_facts": "many"})
    with pytest.raises(ValidationError, match="unknown signal"):
        base.with_overrides({"score_weights": {"vibes": 1.0}})


def test_config_keys_by_section_and_flat_mean_the_same() -> None:
    """ADR-0043: the config is grouped in sections; flat keys (the spelling before the
    sections, used by every grid file and HTTP caller) still mean the same thing."""
    base = RetrieveConfig()
    flat = base.with_overrides({"topk_facts": 4, "rrf_k": 9.0, "rrf_weights": {"fact_graph": 0.5}})
    nested = base.with_overrides(
        {"sizes": {"topk_facts": 4}, "fusion": {"rrf_k": 9.0, "rrf_weights": {"fact_graph": 0.5}}}
    )
    assert flat == nested
    assert nested.fusion.rrf_weights["fact_semantic"] == 1.0  # dict fields still merge
    assert RetrieveConfig(topk_facts=4, rrf_k=9.0) == RetrieveConfig(
        sizes={"topk_facts": 4}, fusion={"rrf_k": 9.0}
    )
    mixed = base.with_overrides({"sizes": {"topk_events": 3}, "topk_facts": 4})
    assert (mixed.sizes.topk_facts, mixed.sizes.topk_events) == (4, 3)
    with pytest.raises(UnknownConfigKey, match="'sizes.topk_fact'"):
        base.with_overrides({"sizes": {"topk_fact": 3}})
    with pytest.raises(ValidationError, match="hot_tier_ratio"):
        base.with_overrides({"context": {"hot_tier_ratio": 0.9, "warm_tier_ratio": 0.9}})


def test_formatter_layout_and_budget() -> None:
    cfg = RetrieveConfig()
    day = datetime(2026, 3, 28, 9, tzinfo=UTC)
    out = format_context(["Lives in Porto Alegre"], ["Prefers working late at night"],
                         [(day, "Had a great meeting with the product team about the roadmap " * 10, None)], cfg)
    lines = out.context.split("\n")
    assert lines[:5] == ["Known facts:", "- Lives in Porto Alegre", "Observed patterns:",
                         "- Prefers working late at night", "Relevant conversations:"]
    assert lines[5].startswith("- (2026-03-28) Had a great meeting") and lines[5].endswith("...")
    assert 300 <= len(lines[5]) - len("- (2026-03-28) ...") + 1 <= 301
    assert format_context([], [], [], cfg).context == ""
    only_events = format_context([], [], [(day, "hello there", "Ana")], cfg.with_overrides({"event_show_speaker": True}))
    assert only_events.context == "Relevant conversations:\n- (2026-03-28) Ana: hello there"
    # budget: 100 tokens -> hot 50, warm 30; each fact line ~ 25 tokens
    facts = [f"fact number {i} " + "x" * 84 for i in range(10)]
    small = format_context(facts, [], [(day, "e" * 60, None)] * 5, cfg.with_overrides({"context_max_tokens": 100}))
    assert small.facts_shown == 3 and small.hot == 2 and small.warm == 1
    assert small.events_shown == 1 and small.tokens <= 110
    tiny = format_context(facts, [], [], cfg.with_overrides({"context_max_tokens": 5}))
    assert tiny.facts_shown == 1  # the best fact is always shown (proportional, not a hard cap)
    assert count_tokens("abcd" * 10) == 10


def test_rerank_parsing_and_blend() -> None:
    assert parse_scores('{"scores": {"1": 0.9, "2": 0, "3": 7}}', 3) == [0.9, 0.0, 1.0]
    assert parse_scores('```json\n{"scores": {"2": 0.5}}\n```', 3) == [0.0, 0.5, 0.0]
    assert parse_scores('[{"id": 1, "score": 0.4}]', 2) == [0.4, 0.0]
    assert parse_scores("[0.1, 0.2]", 2) == [0.1, 0.2]
    for bad in ("nope", '{"scores": {}}', '{"scores": {"9": 1}}'):
        with pytest.raises(RerankFailed):
            parse_scores(bad, 2)
    assert blend(0.9, 1.0, 0.7, 0.1) == pytest.approx(0.9)
    assert blend(0.9, 0.0, 0.7, 0.0) == pytest.approx(0.27)
    assert blend(0.9, 0.05, 0.7, 0.1) == 0.0  # vetoed
    messages = build_messages("Where {{items}} live?", ["Lives in {{query}}", "b"])
    assert messages[0]["role"] == "system" and "JSON" in messages[0]["content"]
    assert "[1] Lives in {{query}}\n[2] b" in messages[1]["content"]
    assert "Query: Where {{items}} live?" in messages[1]["content"]
