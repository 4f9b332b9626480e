"""The sections of ``RetrieveConfig``: one frozen model per stage of the read pipeline,
each knob bounded and documented beside its default (the seed's, docs/spec.md section 3,
unless marked *(engramdb)*). Field names are unique across sections, so ``config.py`` can
accept every key flat as well."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_SCORE_WEIGHTS: dict[str, float] = {"semantic": 0.70, "recency": 0.20, "importance": 0.10}
# Weights of the ranked lists fused by reciprocal rank (``ranking="rrf"``, ADR-0009): facts by
# cosine and by BM25, conversation turns by cosine and by BM25; ``fact_graph`` the facts the
# graph and spreading activation reached, by their strength; ``fact_aggregation`` the facts
# about entities of the type an aggregation query asks for ("who are my friends?", docs/spec.md
# §3.1; LoCoMo has almost none, so its weight is not cross-validated); ``fact_formula``
# the spec's score formula (semantic + keyword + graph + spreading + aggregation) as one more list;
# ``fact_subject`` / ``message_subject`` the subject sweep (ADR-0025): the facts and turns of
# the person a question names, ranked by the question without the name (0 = not run);
# ``fact_person`` / ``message_person`` each named person's own facts and turns by that question,
# the persons' lists interleaved, for list questions, below the top 10 (ADR-0034, LOCO-CV; 0 = not run);
# ``fact_feedback`` / ``message_feedback`` the facts and turns nearest to the question moved towards
# the fused top's vectors (0 = not run; never chosen by LOCO-CV), ``message_neighbour`` the turns
# said next to the fused top's turns (on: chosen in every fold, both LoCoMo modes; the named
# people's own turns first since ADR-0040, ``neighbour_speakers``), both built from the first
# fusion and counted below ``person_lists_from`` (ADR-0037).
DEFAULT_RRF_WEIGHTS: dict[str, float] = {
    "fact_semantic": 1.0,
    "fact_keyword": 1.0,
    "fact_graph": 0.0,
    "fact_aggregation": 1.0,
    "fact_formula": 0.0,
    "message_semantic": 1.0,
    "message_keyword": 1.0,
    "fact_subject": 1.0,
    "message_subject": 1.0,
    "fact_person": 0.5,
    "message_person": 0.5,
    "fact_feedback": 0.0,
    "message_feedback": 0.0,
    "message_neighbour": 1.0,
}
# How much each non-semantic signal can raise the relevance term (noisy-OR, ADR 0006).
# Measured on LoCoMo dev (ADR 0006): keyword (IDF-weighted) earns its 0.50; graph, spreading
# and aggregation are damped by the entity's specificity (a hub such as the user says little),
# after which their weights move Recall@10 by < 1 point.
DEFAULT_SIGNAL_WEIGHTS: dict[str, float] = {
    "keyword": 0.50,
    "graph": 0.50,
    "spreading": 1.00,
    "aggregation": 0.40,
}


def _check_unit_weights(name: str, weights: Mapping[str, float]) -> None:
    for key, value in weights.items():
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name}[{key!r}] must be within [0, 1], got {value}")


class _Section(BaseModel):
    """A group of related knobs; frozen and strict like the whole config."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ResultSizes(_Section):
    """How many facts, turns and patterns a retrieve returns."""

    topk_facts: int = Field(default=20, ge=0, le=500)
    topk_events: int = Field(default=8, ge=0, le=200)
    topk_patterns: int = Field(default=5, ge=0, le=100, description="(engramdb)")


class Filters(_Section):
    """What a candidate must reach to be kept at all."""

    min_confidence: float = Field(default=0.55, ge=0.0, le=1.0)
    min_similarity: float = Field(default=0.20,
        ge=0.0,
        le=1.0,
        description="on the calibrated scale: cosine rescaled so the model's noise floor is 0",
    )
    similarity_floor: float | None = Field(default=None,
        ge=-1.0,
        lt=1.0,
        description="(engramdb) per-model noise floor; None = the embedder's own "
        "(`EmbeddingProvider.similarity_floor`)",
    )
    min_score: float = Field(default=0.15, ge=0.0, le=1.0)
    emotions: list[Literal["neutral", "joy", "sadness", "anger", "fear", "surprise", "disgust"]] | None = Field(
        default=None, max_length=7, description="(engramdb, issue 26) only turns whose recorded "
        "emotion is one of these, and facts with such a turn among their sources; None = no filter")


class Scoring(_Section):
    """The spec's score formula and the factors applied to every ranking's final score."""

    score_weights: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_SCORE_WEIGHTS))
    signal_weights: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_SIGNAL_WEIGHTS), description="(engramdb)"
    )
    ranking: Literal["rrf", "formula"] = Field(
        default="rrf",
        description="(engramdb) 'rrf': facts and turns in one reciprocal-rank fusion of the signals' "
        "rankings (ADR-0009); 'formula': the spec's weighted score for facts, turns apart",
    )
    recency_half_life_days: float = Field(default=14.0, gt=0.0, le=36_500.0)
    confidence_half_life_days: float = Field(default=180.0, gt=0.0, le=36_500.0, description="(engramdb)")
    confidence_decay_floor: float = Field(default=0.80, ge=0.0, le=1.0, description="(engramdb) confidence never decays below this share"
    )
    pattern_boost_max: float = Field(default=0.10, ge=0.0, le=1.0)
    low_vitality_weight: float = Field(default=1.0, ge=0.0, le=1.0, description="(engramdb, "
        "ADR-0022) factor on the final score of facts the vitality job flagged low; 1.0 = off "
        "(the default, until measured on LoCoMo)")
    importance_boost: float = Field(default=0.0, ge=0.0, le=1.0, description="(engramdb, "
        "ADR-0030) facts' final score x(1 - boost*(1 - importance)), turns at importance 0.5: "
        "the jobs' importance (mem_fact_usage) in any ranking; 0 = off (LoCoMo-CV)")
    pattern_fact_boost: float = Field(default=0.0, ge=0.0, le=1.0, description="(engramdb, "
        "ADR-0030) units not cited by an observed pattern score x(1 - boost): the pattern "
        "evidence steps up; 0 = off (LoCoMo-CV)")

    @model_validator(mode="after")
    def _check_weights(self) -> Scoring:
        unknown = set(self.score_weights) - set(DEFAULT_SCORE_WEIGHTS)
        if unknown:
            raise ValueError(f"score_weights: unknown signal(s) {sorted(unknown)}")
        unknown = set(self.signal_weights) - set(DEFAULT_SIGNAL_WEIGHTS)
        if unknown:
            raise ValueError(f"signal_weights: unknown signal(s) {sorted(unknown)}")
        _check_unit_weights("score_weights", self.score_weights)
        _check_unit_weights("signal_weights", self.signal_weights)
        return self


class Fusion(_Section):
    """Reciprocal-rank fusion of the ranked lists (ADR-0009, ADR-0021)."""

    rrf_k: float = Field(default=5.0, gt=0.0, le=1000.0, description="(engramdb) RRF constant (chosen by LOCO-CV, ADR-0009)")
    rrf_weights: dict[str, float] = Field(
        default_factory=lambda: dict(DEFAULT_RRF_WEIGHTS), description="(engramdb) per ranked list"
    )
    diversity_penalty: float = Field(default=0.0, ge=0.0, le=1.0,
        description="(engramdb) rank fusion: each unit from a day already shown above scores "
        "x(1-penalty) per such unit beyond the first diversity_free (ADR-0021); 0 = off")
    diversity_free: int = Field(default=1, ge=1, le=100,
        description="(engramdb) units of one day placed before diversity_penalty applies")
    diversity_start: int = Field(default=0, ge=0, le=1000,
        description="(engramdb) diversity_penalty spares the first this many units of the fused "
        "ranking (they still count as shown): only the tail is spread across days (ADR-0034)")
    decompose: bool = Field(default=False,
        description="(engramdb) rank fusion: a question naming two people or joining two questions "
        "is also asked as its parts, fused by RRF (ADR-0021)")
    time_boost: float = Field(default=1.0, ge=0.0, le=10.0,
        description="(engramdb) rank fusion: units dated inside a time the query names ('in May "
        "2023', 'em 2023', 'last year') score x(1+boost) (ADR-0021, chosen by LOCO-CV); 0 = off")
    drop_hedges: bool = Field(default=True,
        description="(engramdb) rank fusion: BM25 ignores hedge words ('would', 'likely', 'considered', "
        "'talvez') of the query (ADR-0021, chosen by LOCO-CV)")

    @model_validator(mode="after")
    def _check_weights(self) -> Fusion:
        unknown = set(self.rrf_weights) - set(DEFAULT_RRF_WEIGHTS)
        if unknown:
            raise ValueError(f"rrf_weights: unknown list(s) {sorted(unknown)}; known: {sorted(DEFAULT_RRF_WEIGHTS)}")
        _check_unit_weights("rrf_weights", self.rrf_weights)
        return self


class Sweeps(_Section):
    """The subject and per-person sweeps: lists of the named people's own facts and turns (ADR-0025, ADR-0034)."""

    subject_sweep_scope: Literal["list", "any"] = Field(default="any",
        description="(engramdb) subject sweep (rrf_weights fact_subject / message_subject > 0, "
        "ADR-0025): 'list' only for questions asking for several things ('what activities has "
        "X done?', 'how many', 'both'); 'any' whenever the question names one or two entities")
    subject_sweep_per_session: int = Field(default=0, ge=0, le=100,
        description="(engramdb) subject sweep: at most this many units per session (facts: per "
        "day) in its lists, so they span sessions; 0 = no cap")
    subject_sweep_only_subject: bool = Field(default=False,
        description="(engramdb) subject sweep: rank only the subject's facts and turns (else every "
        "fact and turn, by the question without the names)")
    subject_sweep_pair_as_one: bool = Field(default=False,
        description="(engramdb) subject sweep: two names joined by 'and' become one pronoun in the "
        "name-less question ('both they and they' -> 'both they', ADR-0034)")
    person_sweep_scope: Literal["list", "any"] = Field(default="list",
        description="(engramdb) per-person sweep (rrf_weights fact_person / message_person > 0, "
        "ADR-0034): 'list' only for questions asking for several things, 'any' whenever the "
        "question names one or two entities (ADR-0040: with the named neighbours, split in "
        "LOCO-CV and it triples the sweep's time, so per call)")
    person_lists_from: int = Field(default=10, ge=0, le=1000,
        description="(engramdb) fact_person / message_person (and the tail lists fact_feedback, "
        "message_feedback, message_neighbour, ADR-0037) count only below the first this many "
        "units of the fusion of the other lists (ADR-0034); 0 = everywhere")


class TailLists(_Section):
    """The lists built from the first fusion: relevance feedback and the top's neighbouring turns (ADR-0037, ADR-0040)."""

    feedback_depth: int = Field(default=5, ge=1, le=100,
        description="(engramdb) fact_feedback / message_feedback: the first this many units of the "
        "fused ranking give the mean vector added to the question's (ADR-0037)")
    feedback_beta: float = Field(default=1.0, ge=0.0, le=10.0,
        description="(engramdb) fact_feedback / message_feedback: question unit vector + beta x the "
        "mean unit vector of the fused top (Rocchio, ADR-0037)")
    neighbour_depth: int = Field(default=15, ge=1, le=100,
        description="(engramdb) message_neighbour: the turns of the first this many fused units "
        "(a fact: its source turns) are the anchors (ADR-0037: 10; ADR-0040: 15, with the named "
        "people's turns first, chosen by LOCO-CV)")
    neighbour_span: int = Field(default=2, ge=1, le=10,
        description="(engramdb) message_neighbour: turns at most this many places from an anchor in "
        "its session (ADR-0037); with neighbour_speakers 'named…', also this many of the named "
        "people's own turns a side (ADR-0040: 2, chosen by LOCO-CV; 4 before)")
    neighbour_order: Literal["anchor", "distance"] = Field(default="anchor",
        description="(engramdb) message_neighbour: 'anchor' = the best anchor's turns first, nearest "
        "first, then the next anchor's; 'distance' = every anchor's nearest turns first (ADR-0037)")
    neighbour_speakers: Literal["all", "named", "named-first", "named-list"] = Field(default="named-first",
        description="(engramdb) message_neighbour: 'named' = when the question names one or two "
        "people, only the turns they said are neighbours, neighbour_span of theirs a side "
        "(ADR-0040); 'named-first' = those first, then the other turns; 'named-list' = 'named' "
        "only when it also asks for several things (subject_sweep.is_list_question); 'all' = "
        "every turn")


class Candidates(_Section):
    """Candidate generation: per-signal limits and the query's bounds."""

    candidate_pool: int = Field(default=60, ge=1, le=1000, description="(engramdb) per-signal limit")
    hnsw_ef_search: int = Field(default=100, ge=1, le=1000, description="(engramdb)")
    max_query_chars: int = Field(default=2000, ge=16, le=100_000, description="(engramdb)")
    keyword_max_words: int = Field(default=5, ge=0, le=20)
    keyword_min_word_len: int = Field(default=3, ge=1, le=20, description="words longer than 2 chars")


class Graph(_Section):
    """The graph signal: hops from the entities the query names."""

    graph_hops: int = Field(default=2, ge=0, le=4)
    graph_hop_decay: list[Annotated[float, Field(ge=0.0, le=1.0)]] = Field(default_factory=lambda: [1.0, 1.0, 0.5, 0.25, 0.125], max_length=16)
    graph_query_bonus: float = Field(default=1.5, ge=1.0, le=5.0)
    graph_facts_per_entity: int = Field(default=20, ge=1, le=500, description="(engramdb)")
    graph_neighbours_per_entity: int = Field(default=5, ge=1, le=500, description="(engramdb)")

    @model_validator(mode="after")
    def _check_decay(self) -> Graph:
        if not self.graph_hop_decay:
            raise ValueError("graph_hop_decay must not be empty")
        return self


class Planner(_Section):
    """The deterministic planner's widening of broad queries."""

    broad_query_multiplier: int = Field(default=3, ge=1, le=20, description="(engramdb)")
    planner_expansion_limit: int = Field(default=5, ge=0, le=100, description="(engramdb)")
    community_expansion: bool = Field(default=False, description="(engramdb, ADR-0022) the "
        "planner also adds members of the named entities' communities (communities job), "
        "within planner_expansion_limit; off until measured on LoCoMo")


class Spreading(_Section):
    """Spreading activation over the entity graph (the seed's Enhance stage)."""

    spreading_activation_hops: int = Field(default=2, ge=0, le=4)
    spreading_decay_factor: float = Field(default=0.50, ge=0.0, le=1.0)
    spreading_facts_per_entity: int = Field(default=3, ge=0, le=100)
    spreading_max_related_entities: int = Field(default=5, ge=0, le=100)
    spreading_seed_facts: int = Field(default=5, ge=0, le=100, description="(engramdb)")


class Rerank(_Section):
    """The optional LLM reranker (the seed's selective attention)."""

    enable_reranker: bool = Field(default=False, description="(engramdb: the seed says True) "
        "opt-in: with Qwen2.5 1.5B it took R@10 from 79.5 to 9.8 on 33 LoCoMo questions and "
        "added 36 s p50 per retrieve (ADR-0045); turn it on for a model shown to help")
    reranker_weight: float = Field(default=0.70, ge=0.0, le=1.0)
    min_reranker_score: float = Field(default=0.10, ge=0.0, le=1.0)
    reranker_timeout_sec: float = Field(default=5.0, gt=0.0, le=600.0)
    rerank_events: bool = Field(default=True, description="(engramdb) judge conversations too")


class Context(_Section):
    """The token-budgeted context string: tiers, turns' format, profiles."""

    context_max_tokens: int = Field(default=2000, ge=0, le=200_000)
    hot_tier_ratio: float = Field(default=0.50, ge=0.0, le=1.0)
    warm_tier_ratio: float = Field(default=0.30, ge=0.0, le=1.0)
    event_max_chars: int = Field(default=300, ge=10, le=10_000)
    dedupe_events: bool = Field(default=True, description="(engramdb) drop conversations that are the source of a returned fact")
    event_show_speaker: bool = Field(default=False, description="(engramdb) '(date) Speaker: text'")
    profiles_in_context: bool = Field(default=False, description="(engramdb, ADR-0030) an "
        "'About <entity>' section with the profile (profiles job) of entities the query names, "
        "within context_max_tokens; result.profiles. Off: docs/spec.md §3.6 injects no profiles")

    @model_validator(mode="after")
    def _check_tiers(self) -> Context:
        if self.hot_tier_ratio + self.warm_tier_ratio > 1.0 + 1e-9:
            raise ValueError("hot_tier_ratio + warm_tier_ratio must be <= 1")
        return self
