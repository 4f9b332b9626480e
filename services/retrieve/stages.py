"""The stages of ``Retriever.retrieve`` that need neither the pool nor the workers: the call's
state, merging the fact signals, the recency anchor, the optional LLM rerank, selecting what
is returned and formatting it. Kept apart so ``pipeline`` reads as the orchestration only."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from engramdb.domain.ports import LLMProvider
from engramdb.services.retrieve import rerank, signals
from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.formatter import format_context
from engramdb.services.retrieve.fusion import PlacementMemo
from engramdb.services.retrieve.models import RetrievalPlan, ScoredEvent, ScoredFact, ScoredPattern
from engramdb.services.retrieve.planner import PlannerLookup, QueryAnalysis, build_plan, load_lookup
from engramdb.services.retrieve.rank import Candidate, EventCandidate, order_key
from engramdb.services.retrieve.timeexpr import Window
from engramdb.services.retrieve.trace import Trace, ms

# (keyword facts, their ms, semantic facts, their ms) from the side connection
SideOut = tuple[list[tuple[str, float]], float, list[tuple[str, float]], float]
# (message signals, message rows, ms, the subject sweep's turns when read with them) from
# the messages connection
EventsOut = tuple[dict[str, dict[str, float]], list[tuple[Any, ...]], float, "signals.SweptTurns | None"]


@dataclass
class RetrieveCall:
    """One retrieve call's inputs and what its stages hand on (never shared between calls)."""

    agent_id: str
    query: str  # sanitized
    cfg: RetrieveConfig
    as_of: datetime | None
    analysis: QueryAnalysis
    trace: Trace
    plan_start: float  # perf_counter before the query analysis (the plan timing starts there)
    words: list[str]
    floor: float
    f_embed: Future[tuple[str, float]]
    modes: dict[str, str] = field(default_factory=dict)  # keyword mode per table
    # ranking="rrf": list name -> (unit kind, ids best first), filled by the signal stages
    lists: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    reranked: bool = False  # the LLM reranker scored this call's candidates
    subject_rows: list[tuple[Any, ...]] = field(default_factory=list)  # turns the subject sweep found
    # the folded names of the one or two people the question names (the subject sweep's
    # ``Subject.speakers``; empty when it names none or the sweep is off), for the tail lists
    subject_speakers: tuple[str, ...] = ()
    # table -> exact search (True) or HNSW (False) for this agent, ``size_gate``; None: decide in SQL
    small: dict[str, bool | None] = field(default_factory=dict)
    windows: list[Window] | None = None  # the query's time windows, once fusion first asks
    placements: PlacementMemo = field(default_factory=dict)  # fusion's, kept for the call (ADR-0041)
    # the call's session / metadata narrowing (``scope.py``, ADR-0047): in every candidate statement
    scope: signals.Narrowing | None = None

    def query_vector(self) -> str | None:
        """For the workers: the vector, or ``None`` if embedding failed (the main thread
        records the error in the trace)."""
        try:
            return self.f_embed.result()[0]
        except Exception:  # fail-safe: no semantic signal, the others still answer
            return None


def merge(
    semantic: list[tuple[str, float]],
    keyword: list[tuple[str, float]],
    graph_hits: list[signals.GraphHit],
    aggregation: list[tuple[str, float]],
) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Dedupe by fact id, keep every signal's score (the cosine comes with hydration); the
    graph's structural score apart, since rank applies the fact's recency to it."""
    signal_map: dict[str, dict[str, float]] = {}
    for fid, _ in semantic:
        signal_map.setdefault(fid, {})
    for fid, score in keyword:
        signal_map.setdefault(fid, {})["keyword"] = score
    structural: dict[str, float] = {}
    for hit in graph_hits:
        signal_map.setdefault(hit.fact_id, {})
        structural[hit.fact_id] = hit.structural
    for fid, score in aggregation:
        signal_map.setdefault(fid, {})["aggregation"] = score
    return signal_map, structural


def recency_anchor(conn: Any, agent_id: str) -> tuple[datetime, str]:
    """The agent's latest message time, else latest fact time, else the wall clock."""
    row = conn.execute(
        "SELECT (SELECT max(occurred_at) FROM mem_messages WHERE agent_id = %(a)s),"
        "       (SELECT max(valid_from) FROM mem_facts WHERE agent_id = %(a)s)",
        {"a": agent_id},
    ).fetchone()
    if row[0] is not None:
        return row[0], "latest_message"
    if row[1] is not None:
        return row[1], "latest_fact"
    return datetime.now(UTC), "wall_clock"


def plan_stage(
    call: RetrieveCall, conn: Any, names: dict[str, list[tuple[str, str]]] | None = None
) -> tuple[RetrievalPlan, PlannerLookup, datetime]:
    """The plan and the recency anchor (``names``: the planner's name lookup when already
    read, ``planner.load_names``). Its timing runs from the query analysis, less the keyword
    stage when that ran inline."""
    trace = call.trace
    lookup: PlannerLookup = load_lookup(conn, call.agent_id, call.analysis, call.as_of,
                                        communities=call.cfg.planner.community_expansion, names=names)
    if call.as_of is not None:
        anchor, anchor_source = call.as_of, "as_of"
    else:
        anchor, anchor_source = recency_anchor(conn, call.agent_id)
    plan = build_plan(call.analysis, lookup, call.cfg.planner.planner_expansion_limit)
    trace.timings["plan"] = ms(call.plan_start) - trace.timings.get("keyword", 0.0)
    trace.note(
        recency_anchor=anchor.isoformat(),
        recency_anchor_source=anchor_source,
        entity_sources={
            "deterministic": plan.entity_keys("deterministic"),
            "expansion": plan.entity_keys("expansion"),
        },
    )
    return plan, lookup, anchor


def select(
    call: RetrieveCall, ranked: list[Candidate], events: list[EventCandidate]
) -> tuple[list[ScoredFact], list[ScoredEvent]]:
    """Above ``min_score``, the top facts, and the conversations they do not already say."""
    cfg = call.cfg
    # a fused score is a rank-based share, not a relevance: min_score applies to it only
    # once the reranker has judged the candidates
    min_score = cfg.filters.min_score if cfg.scoring.ranking == "formula" or call.reranked else 0.0
    if cfg.scoring.low_vitality_weight < 1.0:  # ADR-0022: flagged facts step back, never vanish
        for c in ranked:
            if c.row.low_vitality:
                c.final *= cfg.scoring.low_vitality_weight
        ranked = sorted(ranked, key=lambda c: (-round(c.final, 9), c.fact_id))
    before = len(ranked)
    ranked = [c for c in ranked if c.final >= min_score and c.final > 0.0]
    call.trace.count(dropped_min_score=before - len(ranked))
    top = ranked[: cfg.sizes.topk_facts]
    # a turn that is the source of a returned fact adds little the fact does not say:
    # leave its place to another conversation (less repetition, more coverage)
    covered = {m for c in top for m in c.row.source_message_ids} if cfg.context.dedupe_events else set()
    events = [e for e in events if e.final >= min_score and e.final > 0.0
              and e.message_id not in covered][: cfg.sizes.topk_events]
    facts = [
        ScoredFact(
            fact_id=c.fact_id,
            fact_text=c.row.fact_text,
            entity_key=c.row.entity_key,
            entity_name=c.row.entity_name,
            score=round(c.final, 6),
            scores=c.scores,
            source_message_ids=c.row.source_message_ids,
            valid_from=c.row.valid_from,
        )
        for c in top
    ]
    scored_events = [
        ScoredEvent(message_id=e.message_id, text=e.text, occurred_at=e.occurred_at, speaker=e.speaker,
                    session_id=e.session_id, score=round(e.final, 6), scores=e.scores)
        for e in events
    ]
    return facts, scored_events


def format_result(
    call: RetrieveCall, facts: list[ScoredFact], patterns: list[ScoredPattern], events: list[ScoredEvent]
) -> str:
    """The context string within the token budget; what it showed goes to the trace."""
    with call.trace.stage("format"):
        formatted = format_context(
            [f.fact_text for f in facts],
            [p.text for p in patterns],
            [(e.occurred_at, e.text, e.speaker) for e in events],
            call.cfg,
        )
    call.trace.note(format={
        "tokens": formatted.tokens, "facts_shown": formatted.facts_shown, "hot": formatted.hot,
        "warm": formatted.warm, "patterns_shown": formatted.patterns_shown,
        "events_shown": formatted.events_shown, "budget": formatted.budget,
    })
    return formatted.context


def rerank_candidates(
    llm: LLMProvider | None, query: str, ranked: list[Candidate], events: list[EventCandidate], cfg: RetrieveConfig
) -> tuple[list[Candidate], list[EventCandidate], dict[str, Any]]:
    """The optional LLM judge over the top ``2·topk`` facts (and events): its score blends
    into the formula; without an answer the ranking stands as it was."""
    if not cfg.rerank.enable_reranker or llm is None:
        return ranked, events, {"status": "off" if llm is None else "disabled"}
    fact_pool = ranked[: 2 * cfg.sizes.topk_facts]
    event_pool = events[: 2 * cfg.sizes.topk_events] if cfg.rerank.rerank_events else []
    items = [c.row.fact_text for c in fact_pool] + [e.text for e in event_pool]
    outcome = rerank.rerank(llm, query, items, cfg.rerank.reranker_timeout_sec)
    info: dict[str, Any] = {"status": outcome.status, "items": len(items),
                            "duration_ms": round(outcome.duration_ms, 3), "prompt": rerank.PROMPT_VERSION,
                            "model": getattr(llm, "name", None)}  # the rerank operation's (ADR-0052)
    if outcome.scores is None:
        return ranked, events, info
    vetoed = 0
    for cand, score in zip(fact_pool, outcome.scores[: len(fact_pool)], strict=True):
        cand.scores["reranker"] = round(score, 6)
        cand.final = rerank.blend(cand.formula, score, cfg.rerank.reranker_weight, cfg.rerank.min_reranker_score)
        vetoed += cand.final == 0.0
    for ev, score in zip(event_pool, outcome.scores[len(fact_pool):], strict=True):
        ev.scores["reranker"] = round(score, 6)
        ev.final = rerank.blend(ev.formula, score, cfg.rerank.reranker_weight, cfg.rerank.min_reranker_score)
        vetoed += ev.final == 0.0
    info["vetoed"] = vetoed
    # only what the reranker judged survives (everything else ranked below the pool)
    new_events = sorted(event_pool, key=lambda e: (-round(e.final, 9), e.message_id)) if cfg.rerank.rerank_events else events
    return sorted(fact_pool, key=order_key), new_events, info
