"""``Retriever``: Plan → Retrieve (signals, concurrently) → Merge & rank → Enhance → Rerank
→ Format (SPEC §3). Reads only the projections (read models), never the event store.

Concurrency (re-measured, ADR 0006): the query embedding runs in a worker thread while the
fact signals run in sequence on ONE pooled connection (plan → graph → aggregation → semantic
→ hydrate → spreading), the keyword facts beside them on a second one (when the pool has at
least 3 connections; else first on the main one); the messages search (semantic + keyword + hydrate in one
statement) runs beside them on a second connection once the vector exists. On a 2-core box
five concurrent connections only time-slice, and each extra connection/round trip costs a
context switch. The whole call is synchronous and thread-safe; async callers use
``asyncio.to_thread``.

Recency anchor ("now" for recency and confidence decay): ``as_of`` when given, else the
agent's latest message time (then latest fact time, then the wall clock). Memories ingested
from old conversations would otherwise all look equally ancient (ADR 0006).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from engramdb.domain.agent_id import check_agent_id
from engramdb.domain.ports import EmbeddingProvider, LLMProvider
from engramdb.infra.pgsql import vector_literal
from engramdb.services.retrieve import enhance, rerank, signals
from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.formatter import format_context
from engramdb.services.retrieve.models import (
    RetrieveResult,
    ScoredEvent,
    ScoredFact,
    ScoredPattern,
)
from engramdb.services.retrieve.planner import (
    PlannerLookup,
    analyze_query,
    build_plan,
    load_lookup,
    sanitize_query,
)
from engramdb.services.retrieve.rank import Candidate, EventCandidate, order_key, rank, rank_events

WaitForPosition = Callable[..., Any]


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000.0, 3)


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


# Agents with at most this many facts (messages) get an exact nearest-neighbour search: the
# true neighbours, and faster than a filtered HNSW walk through a large shared index
# (measured at 10k facts: p95 36 vs 55 ms, ADR-0006). Above it, HNSW with iterative scans.
EXACT_SEARCH_ROWS = 20_000


class Retriever:
    """The read pipeline over a ``psycopg_pool.ConnectionPool`` whose connections see the
    read-model tables (``search_path``). ``llm`` enables the reranker (``None`` = off)."""

    def __init__(
        self,
        pool: Any,
        embedder: EmbeddingProvider,
        llm: LLMProvider | None = None,
        config: RetrieveConfig | None = None,
        wait_for_position: WaitForPosition | None = None,
        *,
        similarity_floor: float | None = None,
        max_workers: int = 4,
        exact_search_rows: int = EXACT_SEARCH_ROWS,
    ) -> None:
        self.pool = pool
        self.embedder = embedder
        self.llm = llm
        self.config = config or RetrieveConfig()
        self.wait_for_position = wait_for_position
        self._floor_override = similarity_floor
        # > 0: agents with at most this many rows in a table get an exact nearest-neighbour
        # search there instead of the shared HNSW index (faster for small agents in a big
        # table, and exact; 0 = HNSW always, the behaviour the quality numbers were taken with)
        self.exact_search_rows = int(exact_search_rows)
        self._keyword_modes: dict[str, str] | None = None  # detected once from pg_indexes
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="engramdb-retrieve")

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> Retriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- helpers ---------------------------------------------------------------------

    def similarity_floor(self, cfg: RetrieveConfig) -> float:
        """Per-model noise floor: config → constructor → the embedder's own (its port)."""
        if cfg.similarity_floor is not None:
            return cfg.similarity_floor
        if self._floor_override is not None:
            return self._floor_override
        return float(self.embedder.similarity_floor)

    def _embed(self, text: str) -> tuple[str, float]:
        start = time.perf_counter()
        embed_query = getattr(self.embedder, "embed_query", None)
        vector = embed_query(text) if callable(embed_query) else self.embedder.embed([text])[0]
        return vector_literal(vector), _ms(start)

    @staticmethod
    def _anchor(conn: Any, agent_id: str) -> tuple[datetime, str]:
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

    def _pool_spares_one(self) -> bool:
        """A third connection for the keyword stage only when the pool has room for it
        beside the main and the messages connections (else run it inline)."""
        max_size = getattr(self.pool, "max_size", 0)
        return isinstance(max_size, int) and max_size >= 3

    # ----- the pipeline ------------------------------------------------------------------

    def retrieve(
        self,
        agent_id: str,
        query: str,
        *,
        as_of: datetime | None = None,
        wait_for: int | None = None,
        config_overrides: dict[str, Any] | None = None,
    ) -> RetrieveResult:
        t0 = time.perf_counter()
        cfg = self.config.with_overrides(config_overrides)
        check_agent_id(agent_id)
        if not isinstance(query, str):
            raise ValueError("query must be a string")
        as_of = _utc(as_of)
        q = sanitize_query(query, cfg.max_query_chars)
        trace: dict[str, Any] = {
            "timings_ms": {},
            "candidates": {},
            "query_chars": len(query),
            "query_truncated": len(q) < len(" ".join(query.split())),
        }
        timings: dict[str, float] = trace["timings_ms"]
        start = time.perf_counter()
        analysis = analyze_query(q)
        if not q or analysis.greeting:  # no DB, no LLM (SPEC §3.1)
            plan = build_plan(analysis, None)
            timings["plan"] = _ms(start)
            return RetrieveResult(agent_id=agent_id, query=q, plan=plan, as_of=as_of,
                                  duration_ms=_ms(t0), trace=trace)
        if wait_for is not None:
            if self.wait_for_position is None:
                raise ValueError("wait_for was given but this Retriever has no wait_for_position")
            wait_start = time.perf_counter()
            self.wait_for_position(wait_for)
            timings["wait_for"] = _ms(wait_start)

        words = signals.keyword_words(q, cfg.keyword_max_words, cfg.keyword_min_word_len)
        trace["keyword_words"] = words
        floor = self.similarity_floor(cfg)
        trace["similarity_floor"] = floor
        trace["similarity_threshold_cosine"] = round(signals.similarity_threshold(cfg, floor), 6)
        submit = self._executor.submit

        f_embed: Future[tuple[str, float]] = submit(self._embed, q)

        def query_vector() -> str | None:
            try:
                return f_embed.result()[0]
            except Exception:  # fail-safe: no semantic signal, the others still answer
                return None

        def events_signal() -> tuple[dict[str, dict[str, float]], list[tuple[Any, ...]], float]:
            # messages run beside the fact signals on their own connection (the second core)
            qv = query_vector()
            ev_start = time.perf_counter()
            with self.pool.connection() as ev_conn:
                sig, rows_ = signals.message_events(
                    ev_conn, agent_id, qv, words, cfg, floor, as_of, modes["mem_messages"], self.exact_search_rows)
            return sig, rows_, _ms(ev_start)

        with self.pool.connection() as conn:
            # One connection, statements in sequence: on a 2-core box five concurrent signals
            # only time-slice, and every extra connection/round trip costs a context switch.
            if self._keyword_modes is None:
                self._keyword_modes = signals.keyword_modes(conn)
            modes = self._keyword_modes
            trace["keyword_mode"] = modes
            f_events = submit(events_signal) if cfg.topk_events > 0 else None

            def side_signals() -> tuple[list[tuple[str, float]], float, list[tuple[str, float]], float]:
                side_start = time.perf_counter()
                with self.pool.connection() as side_conn:
                    found = signals.keyword_facts(side_conn, agent_id, words, cfg, as_of, modes["mem_facts"])
                    kw_ms = _ms(side_start)
                    qv = query_vector()
                    sem_start = time.perf_counter()
                    near = (signals.semantic_facts(side_conn, agent_id, qv, cfg, floor, as_of, self.exact_search_rows)
                            if qv else [])
                return found, kw_ms, near, _ms(sem_start)

            # The keyword facts (IDF counts + scoring, the longest fact statement at 100k) and
            # then the semantic search run on a third connection beside plan → graph →
            # aggregation when the pool can spare it (at least 3 connections, so waiting for
            # it here can never starve the pool): on the 2-core box this took 100k p95 from
            # ~53 to ~48 ms (ADR 0006). Same statements, same results.
            f_side: Future[tuple[list[tuple[str, float]], float, list[tuple[str, float]], float]] | None = None
            if self._pool_spares_one():
                f_side = submit(side_signals)
            else:
                stage = time.perf_counter()
                keyword = signals.keyword_facts(conn, agent_id, words, cfg, as_of, modes["mem_facts"])
                timings["keyword"] = _ms(stage)

            # plan
            lookup: PlannerLookup = load_lookup(conn, agent_id, analysis, as_of)
            if as_of is not None:
                anchor, anchor_source = as_of, "as_of"
            else:
                anchor, anchor_source = self._anchor(conn, agent_id)
            plan = build_plan(analysis, lookup, cfg.planner_expansion_limit)
            timings["plan"] = _ms(start) - timings.get("keyword", 0.0)
            trace["recency_anchor"] = anchor.isoformat()
            trace["recency_anchor_source"] = anchor_source
            trace["entity_sources"] = {
                "deterministic": plan.entity_keys("deterministic"),
                "expansion": plan.entity_keys("expansion"),
            }

            seeds = {e.entity_key: e.in_query for e in plan.entities if e.source == "deterministic"}
            stage = time.perf_counter()
            graph_hits, graph_nodes = signals.graph_facts(
                conn, agent_id, seeds, lookup.edges, cfg, as_of, anchor, plan.broad_query)
            timings["graph"] = _ms(stage)
            stage = time.perf_counter()
            aggregation = signals.aggregation_facts(conn, agent_id, plan.pattern_queries, cfg, as_of)
            timings["aggregation"] = _ms(stage)

            qvec: str | None
            try:
                qvec, timings["embed"] = f_embed.result()
            except Exception as exc:  # fail-safe: no semantic signal, the others still answer
                qvec = None
                trace["embed_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            if f_side is not None:
                keyword, timings["keyword"], semantic, timings["semantic"] = f_side.result()
            else:
                stage = time.perf_counter()
                semantic = (
                    signals.semantic_facts(conn, agent_id, qvec, cfg, floor, as_of, self.exact_search_rows)
                    if qvec else [])
                timings["semantic"] = _ms(stage)

            counts = trace["candidates"]
            counts.update(semantic=len(semantic), keyword=len(keyword), graph=len(graph_hits),
                          aggregation=len(aggregation))
            trace["graph_entities"] = {str(h): sorted(k for k, n in graph_nodes.items() if n.hop == h)
                                       for h in sorted({n.hop for n in graph_nodes.values()})}

            # merge: dedupe by fact id, keep every signal's score
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

            stage = time.perf_counter()
            rows = signals.hydrate_facts(conn, agent_id, sorted(signal_map), qvec)
            timings["hydrate"] = _ms(stage)
            cands = [Candidate(rows[fid], dict(sig), structural.get(fid, 0.0))
                     for fid, sig in signal_map.items() if fid in rows]
            stage = time.perf_counter()
            ranked, dropped = rank(cands, cfg, floor, anchor)
            timings["rank"] = _ms(stage)
            counts["merged"] = len(cands)
            counts["dropped_confidence"] = dropped

            # enhance: spreading activation + pattern signal (already in the formula)
            stage = time.perf_counter()
            spread = enhance.spread(conn, agent_id, ranked, set(signal_map), cfg, as_of)
            trace["spreading_candidates_returned"] = spread.returned
            trace["spreading_candidates_unique"] = spread.unique
            trace["spreading_entities"] = {str(h): keys for h, keys in spread.entities.items()}
            if spread.activation:
                extra = signals.hydrate_facts(conn, agent_id, sorted(spread.activation), qvec)
                new = [Candidate(extra[fid], {"spreading": act}) for fid, act in spread.activation.items() if fid in extra]
                more, dropped2 = rank(new, cfg, floor, anchor)
                counts["dropped_confidence"] += dropped2
                ranked = sorted(ranked + more, key=order_key)
            counts["spreading"] = spread.unique
            n_fact_candidates = len(cands) + len(spread.activation)
            timings["enhance"] = _ms(stage)

        event_signals: dict[str, dict[str, float]] = {}
        event_rows: list[tuple[Any, ...]] = []
        timings["events"] = 0.0
        if f_events is not None:
            event_signals, event_rows, timings["events"] = f_events.result()
        counts["events"] = len(event_rows)
        events = rank_events(event_rows, event_signals, cfg, floor, anchor)

        # rerank (optional)
        stage = time.perf_counter()
        ranked, events, rerank_trace = self._rerank(q, ranked, events, cfg)
        trace["reranker"] = rerank_trace
        timings["rerank"] = _ms(stage)

        before = len(ranked)
        ranked = [c for c in ranked if c.final >= cfg.min_score and c.final > 0.0]
        counts["dropped_min_score"] = before - len(ranked)
        top = ranked[: cfg.topk_facts]
        # a turn that is the source of a returned fact adds little the fact does not say:
        # leave its place to another conversation (less repetition, more coverage)
        covered = {m for c in top for m in c.row.source_message_ids} if cfg.dedupe_events else set()
        events = [e for e in events if e.final >= cfg.min_score and e.final > 0.0
                  and e.message_id not in covered][: cfg.topk_events]

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
        patterns: list[ScoredPattern] = []
        if cfg.topk_patterns > 0 and (facts or scored_events):
            with self.pool.connection() as conn:
                for pid, text, conf, support, _overlap in signals.patterns_for(
                    conn, agent_id, [f.fact_id for f in facts], words, cfg.topk_patterns, as_of
                ):
                    patterns.append(ScoredPattern(pattern_id=pid, text=text, score=round(conf, 6),
                                                  supporting_fact_ids=support))

        stage = time.perf_counter()
        formatted = format_context(
            [f.fact_text for f in facts],
            [p.text for p in patterns],
            [(e.occurred_at, e.text, e.speaker) for e in scored_events],
            cfg,
        )
        timings["format"] = _ms(stage)
        trace["format"] = {
            "tokens": formatted.tokens, "facts_shown": formatted.facts_shown, "hot": formatted.hot,
            "warm": formatted.warm, "patterns_shown": formatted.patterns_shown,
            "events_shown": formatted.events_shown, "budget": formatted.budget,
        }
        return RetrieveResult(
            agent_id=agent_id,
            query=q,
            context=formatted.context,
            facts=facts,
            patterns=patterns,
            events=scored_events,
            plan=plan,
            total_candidates=n_fact_candidates + len(event_rows),
            duration_ms=_ms(t0),
            as_of=as_of,
            trace=trace,
        )

    def _rerank(
        self, query: str, ranked: list[Candidate], events: list[EventCandidate], cfg: RetrieveConfig
    ) -> tuple[list[Candidate], list[EventCandidate], dict[str, Any]]:
        if not cfg.enable_reranker or self.llm is None:
            return ranked, events, {"status": "off" if self.llm is None else "disabled"}
        fact_pool = ranked[: 2 * cfg.topk_facts]
        event_pool = events[: 2 * cfg.topk_events] if cfg.rerank_events else []
        items = [c.row.fact_text for c in fact_pool] + [e.text for e in event_pool]
        outcome = rerank.rerank(self.llm, query, items, cfg.reranker_timeout_sec)
        info: dict[str, Any] = {"status": outcome.status, "items": len(items),
                                "duration_ms": round(outcome.duration_ms, 3), "prompt": rerank.PROMPT_VERSION}
        if outcome.scores is None:
            return ranked, events, info
        vetoed = 0
        for cand, score in zip(fact_pool, outcome.scores[: len(fact_pool)], strict=True):
            cand.scores["reranker"] = round(score, 6)
            cand.final = rerank.blend(cand.formula, score, cfg.reranker_weight, cfg.min_reranker_score)
            vetoed += cand.final == 0.0
        for ev, score in zip(event_pool, outcome.scores[len(fact_pool):], strict=True):
            ev.scores["reranker"] = round(score, 6)
            ev.final = rerank.blend(ev.formula, score, cfg.reranker_weight, cfg.min_reranker_score)
            vetoed += ev.final == 0.0
        info["vetoed"] = vetoed
        # only what the reranker judged survives (everything else ranked below the pool)
        new_events = sorted(event_pool, key=lambda e: (-round(e.final, 9), e.message_id)) if cfg.rerank_events else events
        return sorted(fact_pool, key=order_key), new_events, info

