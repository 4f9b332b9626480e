"""``Retriever``: Plan → Retrieve (signals, concurrently) → Merge & rank → Enhance → Rerank
→ Format (docs/spec.md §3). Reads only the projections (read models), never the event store.

Concurrency (ADR 0006, ADR-0010): the query embedding runs on an embedding thread while the
fact signals run in sequence on ONE connection from the read pool (plan → graph → aggregation
→ semantic → hydrate → spreading); with a worker pool, keyword + semantic facts and the
messages run beside them on database workers (``workers``: why that cannot deadlock), else
on the request's connection after them. On 2 cores more connections only time-slice. The
whole call is synchronous and thread-safe; async callers use ``asyncio.to_thread``.

Why this module is long: the orchestration (which stage runs where, on which connection) is
one sequence that reads best in one place; the pure parts live in ``stages``, ``fusion``,
``diversity`` and ``decompose``.

``retrieve`` is a sequence of named stage methods, each timed into ``result.trace`` through
``trace.Trace``; the stages that touch neither the pool nor the workers live in ``stages``.

Recency anchor ("now" for recency and confidence decay): ``as_of`` when given, else the
agent's latest message time (then latest fact time, then the wall clock). Memories ingested
from old conversations would otherwise all look equally ancient (ADR 0006).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from datetime import UTC, datetime
from typing import Any

from engramdb.domain.agent_id import check_agent_id
from engramdb.domain.ports import EmbeddingProvider, LLMProvider
from engramdb.domain.time_range import check_instant
from engramdb.infra.pgsql import vector_literal
from engramdb.services.retrieve import (
    directive_section,
    emotion_filter,
    job_boosts,
    profile_section,
    signals,
    spreading_activation,
    subject_sweep,
    sweep_merged,
    tail_lists,
)
from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.decompose import fuse_runs, sub_queries
from engramdb.services.retrieve.fusion import EVENT, FACT, fuse_candidates, head_units
from engramdb.services.retrieve.models import (
    RetrievalPlan,
    RetrieveResult,
    ScoredEvent,
    ScoredFact,
    ScoredPattern,
)
from engramdb.services.retrieve.planner import (
    PlannerLookup,
    QueryAnalysis,
    analyze_query,
    build_plan,
    load_names,
    sanitize_query,
)
from engramdb.services.retrieve.rank import Candidate, EventCandidate, order_key, rank, rank_events
from engramdb.services.retrieve.scope import BroadVerdicts, RetrieveFilter, narrowing
from engramdb.services.retrieve.signals.rrf_lists import (
    bm25_fact_signal,
    message_bm25,
    message_signals,
    message_signals_and_swept,
)
from engramdb.services.retrieve.size_gate import SizeGate
from engramdb.services.retrieve.stages import (
    EventsOut,
    RetrieveCall,
    SideOut,
    format_result,
    merge,
    plan_stage,
    rerank_candidates,
    select,
)
from engramdb.services.retrieve.timeexpr import time_windows
from engramdb.services.retrieve.trace import Trace, ms
from engramdb.services.retrieve.workers import Workers, done

WaitForPosition = Callable[..., Any]


def _utc(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return check_instant(value, "as_of").astimezone(UTC)  # in range first: no OverflowError


# Agents with at most this many facts (messages) get an exact nearest-neighbour search: the
# true neighbours, and faster than a filtered HNSW walk through a large shared index
# (measured at 10k facts: p95 36 vs 55 ms, ADR-0006). Above it, HNSW with iterative scans.
EXACT_SEARCH_ROWS = 20_000


class Retriever:
    """The read pipeline over a ``psycopg_pool.ConnectionPool`` whose connections see the
    read-model tables (``search_path``). ``llm`` enables the reranker (``None`` = off).
    ``worker_pool`` (lent, e.g. ``infra.read_pool.open_worker_pool``): side stages on workers."""

    def __init__(
        self,
        pool: Any,
        embedder: EmbeddingProvider,
        llm: LLMProvider | None = None,
        config: RetrieveConfig | None = None,
        wait_for_position: WaitForPosition | None = None,
        *,
        similarity_floor: float | None = None,
        worker_pool: Any = None,
        embed_workers: int = 2,
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
        self._size_gate = SizeGate(self.exact_search_rows)
        self._broad = BroadVerdicts()  # narrowings known to be broad (ADR-0047)
        self._keyword_modes: dict[str, str] | None = None  # detected once from pg_indexes
        self._workers = Workers(worker_pool, embed_workers)

    def close(self) -> None:
        self._workers.close()

    def __enter__(self) -> Retriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def similarity_floor(self, cfg: RetrieveConfig) -> float:
        """Per-model noise floor: config → constructor → the embedder's own (its port)."""
        if cfg.filters.similarity_floor is not None:
            return cfg.filters.similarity_floor
        if self._floor_override is not None:
            return self._floor_override
        return float(self.embedder.similarity_floor)

    def _embed(self, text: str) -> tuple[str, float]:
        start = time.perf_counter()
        embed_query = getattr(self.embedder, "embed_query", None)
        vector = embed_query(text) if callable(embed_query) else self.embedder.embed([text])[0]
        return vector_literal(vector), ms(start)

    # ----- the pipeline ------------------------------------------------------------------

    def retrieve(
        self,
        agent_id: str,
        query: str,
        *,
        as_of: datetime | None = None,
        wait_for: int | None = None,
        config_overrides: dict[str, Any] | None = None,
        within: RetrieveFilter | None = None,
    ) -> RetrieveResult:
        """``within``: only turns (and facts drawn from them) of these sessions / this
        metadata, decided inside every candidate statement (``scope.py``, ADR-0047).

        plan → embed ∥ candidates (keyword, semantic, graph, aggregation; messages) → merge &
        rank → spread → events → rerank → select → patterns → format."""
        t0 = time.perf_counter()
        cfg = self.config.with_overrides(config_overrides)
        check_agent_id(agent_id)
        if not isinstance(query, str):
            raise ValueError("query must be a string")
        as_of = _utc(as_of)
        q = sanitize_query(query, cfg.candidates.max_query_chars)
        trace = Trace(query, q)
        plan_start = time.perf_counter()
        analysis = analyze_query(q)
        if not q or analysis.greeting:  # no DB, no LLM (docs/spec.md §3.1)
            plan = build_plan(analysis, None)
            trace.timings["plan"] = ms(plan_start)
            return RetrieveResult(agent_id=agent_id, query=q, plan=plan, as_of=as_of,
                                  duration_ms=ms(t0), trace=trace.data)
        self._wait(wait_for, trace)
        call = self._prepare(agent_id, q, cfg, as_of, analysis, trace, plan_start, narrowing(within))
        if within is not None:
            trace.note(within=within.as_dict())
        with self.pool.connection() as conn:
            # One connection, statements in sequence: on a 2-core box five concurrent signals
            # only time-slice, and every extra connection/round trip costs a context switch.
            plan, anchor, ranked, n_fact_candidates, f_events = self._fact_stages(call, conn)
        f_patterns = self._prefetch_patterns(call, ranked)
        events, event_rows = self._events(call, f_events, anchor)
        if cfg.scoring.ranking == "rrf":
            if tail_lists.enabled(cfg.fusion.rrf_weights):
                ranked, events = self._tail(call, ranked, events, anchor)
            else:
                ranked, events = self._fuse(call, ranked, events, anchor)
            if cfg.fusion.decompose:
                ranked, events = self._decomposed(call, ranked, events, anchor)
        with trace.stage("rerank"):
            ranked, events, rerank_trace = rerank_candidates(self.llm, q, ranked, events, cfg)
            trace.note(reranker=rerank_trace)
            call.reranked = rerank_trace.get("status") == "ok"
        ranked, events = job_boosts.reweight(self.pool, call, ranked, events)  # ADR-0030
        ranked, events = emotion_filter.apply(self.pool, call, ranked, events)  # issue 26
        facts, scored_events = select(call, ranked, events)
        patterns = self._patterns(call, facts, scored_events, f_patterns)
        # an entity's profile sums up every fact about it, whatever session it came from:
        # a narrowed call shows none (ADR-0047); directives are the agent's, kept
        profiles = profile_section.profiles_for(self.pool, call, plan) if call.scope is None else []
        directives = directive_section.directives_for(self.pool, call)  # ADR-0045
        shown_facts, shown_events = directive_section.without_directives(facts, scored_events, directives)
        context = directive_section.format_with(call, directives, lambda d: profile_section.format_with(
            d, profiles, lambda c: format_result(c, shown_facts, patterns, shown_events)))
        return RetrieveResult(
            agent_id=agent_id,
            query=q,
            context=context,
            facts=facts,
            patterns=patterns,
            events=scored_events,
            profiles=profiles,
            directives=directives,
            plan=plan,
            total_candidates=n_fact_candidates + len(event_rows),
            duration_ms=ms(t0),
            as_of=as_of,
            trace=trace.data,
        )

    # ----- stages (in the order they run) ----------------------------------------------

    def _wait(self, wait_for: int | None, trace: Trace) -> None:
        """Read-your-writes: block until the projections include ``wait_for``."""
        if wait_for is None:
            return
        if self.wait_for_position is None:
            raise ValueError("wait_for was given but this Retriever has no wait_for_position")
        with trace.stage("wait_for"):
            self.wait_for_position(wait_for)

    def _prepare(
        self,
        agent_id: str,
        q: str,
        cfg: RetrieveConfig,
        as_of: datetime | None,
        analysis: QueryAnalysis,
        trace: Trace,
        plan_start: float,
        scope: signals.Narrowing | None = None,
    ) -> RetrieveCall:
        """Keyword words and the similarity floor; the query embedding starts in a worker."""
        words = signals.keyword_words(q, cfg.candidates.keyword_max_words, cfg.candidates.keyword_min_word_len)
        trace.note(keyword_words=words)
        floor = self.similarity_floor(cfg)
        trace.note(similarity_floor=floor,
                   similarity_threshold_cosine=round(signals.similarity_threshold(cfg, floor), 6))
        f_embed: Future[tuple[str, float]] = self._workers.embed(self._embed, q)
        return RetrieveCall(agent_id, q, cfg, as_of, analysis, trace, plan_start, words, floor, f_embed, scope=scope)

    def _fact_stages(
        self, call: RetrieveCall, conn: Any
    ) -> tuple[RetrievalPlan, datetime, list[Candidate], int, Future[EventsOut] | None]:
        """Every fact stage on the main connection; with a worker pool the messages and
        keyword + semantic facts run beside them on workers, else here after them."""
        if self._keyword_modes is None:
            self._keyword_modes = signals.keyword_modes(conn)
        call.modes = self._keyword_modes
        call.small = self._size_gate.verdicts(conn, call.agent_id)
        narrowed = call.scope is not None
        if narrowed:  # the subject first: its question's embedding starts before the probe
            names, swept = self._names_and_subject(call, conn)
        if call.scope is not None and not call.scope.selective:
            call.scope = self._broad.probe(conn, call.agent_id, call.scope)
            call.trace.note(within_selective=call.scope.selective if call.scope else None,
                            within_few_turns=call.scope.few_turns if call.scope else None)
        call.trace.note(keyword_mode=call.modes)
        selective = call.scope is not None and call.scope.selective
        exact_turns = call.scope is not None and (selective or call.scope.few_turns)
        # the sweep's turns read by the turn lists' statement, on the events worker (ADR-0047)
        turns_merged = self._workers.concurrent and sweep_merged.turns_merged(
            call, swept if exact_turns else None, self.exact_search_rows)
        f_events = (self._workers.submit(self._events_signal, call, swept if turns_merged else None)
                    if call.cfg.sizes.topk_events > 0 else None)
        # merged: one read of the passing facts for both searches, once both questions are
        # embedded. Both embeddings start before the probe (above): the name-less question's
        # no longer ends ~4 ms after the question's, and two reads of the same rows cost ~10 ms
        # more of the two cores than one (ten sessions' 10,000 facts at 100k, ADR-0047)
        merged = self._workers.concurrent and sweep_merged.facts_merged(call, swept if selective else None)
        f_side, keyword = self._start_side_signals(call, conn, semantic=not merged)
        if not narrowed:
            names, swept = self._names_and_subject(call, conn)
        # the sweep's statements on a worker, as soon as its vector is there: beside the plan,
        # the graph and the semantic search instead of after them (ADR-0038)
        f_sweep = (self._workers.submit(self._sweep_signal, call, swept, not merged, not turns_merged)
                   if swept is not None else None)
        plan, lookup, anchor = plan_stage(call, conn, names)
        # graph and spreading only feed the formula and the graph list: when rank fusion gives
        # both no weight, their statements would be spent on nothing
        structure = call.cfg.scoring.ranking == "formula" or any(
            call.cfg.fusion.rrf_weights.get(name, 0.0) > 0.0 for name in ("fact_graph", "fact_formula"))
        graph_hits, graph_nodes = self._graph(call, conn, plan, lookup, anchor) if structure else ([], {})
        with call.trace.stage("aggregation"):
            aggregation = signals.aggregation_facts(conn, call.agent_id, plan.pattern_queries, call.cfg, call.as_of,
                                                    scope=call.scope)
        call.lists["fact_aggregation"] = (FACT, [fid for fid, _ in aggregation])
        qvec = self._query_vector(call)
        # merged: the request thread reads both exact searches while the side worker runs BM25
        both = self._semantic_and_swept(call, conn, qvec, swept) if merged and swept is not None else None
        if f_side is not None:
            keyword, call.trace.timings["keyword"], semantic, sem_ms = f_side.result()
            call.trace.timings.setdefault("semantic", sem_ms)
        else:
            with call.trace.stage("semantic"):
                semantic = self._semantic_facts(conn, call, qvec)
        semantic, swept_facts = both if both is not None else (semantic, None)
        call.lists["fact_semantic"] = (FACT, [fid for fid, _ in semantic])
        call.trace.count(semantic=len(semantic), keyword=len(keyword), graph=len(graph_hits),
                         aggregation=len(aggregation))
        call.trace.note(graph_entities={str(h): sorted(k for k, n in graph_nodes.items() if n.hop == h)
                                        for h in sorted({n.hop for n in graph_nodes.values()})})
        signal_map, structural = merge(semantic, keyword, graph_hits, aggregation)
        if f_sweep is not None:
            sweep_out = f_sweep.result()
            swept_ids = subject_sweep.apply(call, sweep_out if swept_facts is None else
                                            sweep_merged.with_facts(sweep_out, swept_facts, call.cfg))
        else:
            swept_ids = subject_sweep.finish(call, conn, swept, qvec, self.exact_search_rows)
        for fid in swept_ids:
            signal_map.setdefault(fid, {})
        ranked, n_merged = self._hydrate_and_rank(call, conn, signal_map, structural, qvec, anchor)
        if not self._workers.concurrent and call.cfg.sizes.topk_events > 0:  # no workers: messages here
            f_events = done(self._events_on(conn, call))
        if not structure:
            call.trace.note(spreading_candidates_returned=0, spreading_candidates_unique=0, spreading_entities={})
            call.trace.count(spreading=0)
            return plan, anchor, ranked, n_merged, f_events
        ranked, n_spread = self._spread(call, conn, ranked, set(signal_map), qvec, anchor)
        return plan, anchor, ranked, n_merged + n_spread, f_events

    def _names_and_subject(self, call: RetrieveCall, conn: Any) -> tuple[Any, subject_sweep.Started | None]:
        """The planner's name lookup and the subject sweep's start (its embedding begins)."""
        names = load_names(conn, call.agent_id, call.analysis)
        return names, subject_sweep.start(call, names, lambda text: self._workers.embed(self._embed, text))

    def _semantic_and_swept(self, call: RetrieveCall, conn: Any, qvec: str | None,
                            started: subject_sweep.Started) -> tuple[list[tuple[str, float]], list[tuple[str, str]] | None]:
        """``sweep_merged.facts_merged``: the semantic facts and the sweep's facts from one read
        of the listed facts, on the request's connection beside the side worker's BM25 (on the
        side worker after it, they sat on the call's critical path). Waits only for the two
        embeddings; without the name-less question's vector, the semantic search alone."""
        with call.trace.stage("semantic"):
            sweep_vec = _vector_or_none(started[1])
            if sweep_vec is None or call.scope is None:  # the sweep reports its error itself
                return self._semantic_facts(conn, call, qvec), None
            fetch = subject_sweep.fetch_for(call.cfg.candidates.candidate_pool, call.cfg.sweeps.subject_sweep_per_session)
            return signals.semantic_and_swept_facts(conn, call.agent_id, qvec, sweep_vec, call.cfg, call.floor,
                                                    call.as_of, call.scope, fetch)

    def _semantic_facts(self, conn: Any, call: RetrieveCall, qvec: str | None) -> list[tuple[str, float]]:
        """The semantic signal on ``conn`` (none without the question's vector)."""
        if not qvec:
            return []
        return signals.semantic_facts(conn, call.agent_id, qvec, call.cfg, call.floor, call.as_of,
                                      self.exact_search_rows, call.small.get("mem_facts"), scope=call.scope)

    def _start_side_signals(
        self, call: RetrieveCall, conn: Any, semantic: bool = True
    ) -> tuple[Future[SideOut] | None, list[tuple[str, float]]]:
        """The keyword facts (IDF counts + scoring, the longest fact statement at 100k) and
        then the semantic search run on a worker connection beside plan → graph → aggregation
        when there is a worker pool: on the 2-core box this took 100k p95 from ~53 to ~48 ms
        (ADR 0006). Same statements, same results. Else the keyword facts run first, here."""
        f_side = self._workers.submit(self._side_signals, call, semantic)
        if f_side is not None:
            return f_side, []
        with call.trace.stage("keyword"):
            keyword = self._keyword_facts(conn, call)
        return None, keyword

    @staticmethod
    def _keyword_facts(conn: Any, call: RetrieveCall) -> list[tuple[str, float]]:
        if call.cfg.scoring.ranking == "rrf":
            return bm25_fact_signal(conn, call)
        return signals.keyword_facts(conn, call.agent_id, call.words, call.cfg, call.as_of, call.modes["mem_facts"],
                                     scope=call.scope)

    def _side_signals(self, call: RetrieveCall, semantic: bool) -> SideOut:
        """BM25's facts, then (``semantic``) the semantic search; without it, the request thread
        reads the semantic facts with the sweep's (``_semantic_and_swept``)."""
        side_start = time.perf_counter()
        with self._workers.connection() as side_conn:
            found = self._keyword_facts(side_conn, call)
            kw_ms = ms(side_start)
            if not semantic:
                return found, kw_ms, [], 0.0
            qv = call.query_vector()
            sem_start = time.perf_counter()
            near = self._semantic_facts(side_conn, call, qv)
        return found, kw_ms, near, ms(sem_start)

    def _sweep_signal(self, call: RetrieveCall, started: subject_sweep.Started, facts: bool,
                      turns: bool) -> subject_sweep.Swept:
        """The subject sweep's statements on a worker connection (ADR-0038); ``facts``: also
        its facts over every fact, unless the request thread reads them (``facts_merged``);
        ``turns``: its turns over every turn, unless the events worker reads them
        (``turns_merged``)."""
        with self._workers.connection() as sweep_conn:
            return subject_sweep.run(call, sweep_conn, started, call.query_vector, self.exact_search_rows, facts,
                                     turns)

    def _events_signal(self, call: RetrieveCall, started: subject_sweep.Started | None) -> EventsOut:
        """Messages run beside the fact signals on a worker connection (the second core);
        ``started``: with the subject sweep's turns (``turns_merged``)."""
        with self._workers.connection() as ev_conn:
            return self._events_on(ev_conn, call, started)

    def _events_on(self, conn: Any, call: RetrieveCall, started: subject_sweep.Started | None = None) -> EventsOut:
        bm25_ms = 0.0
        bm25_found = None
        if call.cfg.scoring.ranking == "rrf":  # BM25 needs no vector: read while it is embedded (ADR-0042)
            bm25_start = time.perf_counter()
            bm25_found = message_bm25(conn, call)
            bm25_ms = ms(bm25_start)
        qv = call.query_vector()
        # the name-less question's vector (a database worker may wait for the embedding
        # thread); without it the sweep reports its error and the lists run alone
        sweep_vec = None if started is None else _vector_or_none(started[1])
        ev_start = time.perf_counter()
        if sweep_vec is not None:
            fetch = subject_sweep.fetch_for(call.cfg.candidates.candidate_pool,
                                            call.cfg.sweeps.subject_sweep_per_session)
            sig, rows_, swept = message_signals_and_swept(conn, call, qv, sweep_vec, fetch, bm25_found)
            return sig, rows_, bm25_ms + ms(ev_start), swept
        if call.cfg.scoring.ranking == "rrf":
            sig, rows_ = message_signals(conn, call, qv, self.exact_search_rows, bm25_found)
        else:
            sig, rows_ = signals.message_events(
                conn, call.agent_id, qv, call.words, call.cfg, call.floor, call.as_of,
                call.modes["mem_messages"], self.exact_search_rows, call.small.get("mem_messages"),
                scope=call.scope)
        return sig, rows_, bm25_ms + ms(ev_start), None

    def _graph(
        self, call: RetrieveCall, conn: Any, plan: RetrievalPlan, lookup: PlannerLookup, anchor: datetime
    ) -> tuple[list[signals.GraphHit], dict[str, signals.GraphNode]]:
        seeds = {e.entity_key: e.in_query for e in plan.entities if e.source == "deterministic"}
        with call.trace.stage("graph"):
            return signals.graph_facts(
                conn, call.agent_id, seeds, lookup.edges, call.cfg, call.as_of, anchor, plan.broad_query,
                scope=call.scope)

    def _query_vector(self, call: RetrieveCall) -> str | None:
        """The query vector, once the embedding worker is done (``None``: no semantic signal)."""
        try:
            qvec, call.trace.timings["embed"] = call.f_embed.result()
            return qvec
        except Exception as exc:  # fail-safe: no semantic signal, the others still answer
            call.trace.note(embed_error=f"{type(exc).__name__}: {str(exc)[:200]}")
            return None

    def _hydrate_and_rank(
        self,
        call: RetrieveCall,
        conn: Any,
        signal_map: dict[str, dict[str, float]],
        structural: dict[str, float],
        qvec: str | None,
        anchor: datetime,
    ) -> tuple[list[Candidate], int]:
        with call.trace.stage("hydrate"):
            rows = signals.hydrate_facts(conn, call.agent_id, sorted(signal_map), qvec, call.scope)
        cands = [Candidate(rows[fid], dict(sig), structural.get(fid, 0.0))
                 for fid, sig in signal_map.items() if fid in rows]
        with call.trace.stage("rank"):
            ranked, dropped = rank(cands, call.cfg, call.floor, anchor)
        call.trace.count(merged=len(cands), dropped_confidence=dropped)
        return ranked, len(cands)

    def _spread(
        self, call: RetrieveCall, conn: Any, ranked: list[Candidate], known: set[str], qvec: str | None, anchor: datetime
    ) -> tuple[list[Candidate], int]:
        """Enhance: spreading activation + pattern signal (already in the formula)."""
        trace, cfg = call.trace, call.cfg
        with trace.stage("enhance"):
            spread = spreading_activation.spread(conn, call.agent_id, ranked, known, cfg, call.as_of, call.scope)
            trace.note(
                spreading_candidates_returned=spread.returned,
                spreading_candidates_unique=spread.unique,
                spreading_entities={str(h): keys for h, keys in spread.entities.items()},
            )
            if spread.activation:
                extra = signals.hydrate_facts(conn, call.agent_id, sorted(spread.activation), qvec, call.scope)
                new = [Candidate(extra[fid], {"spreading": act})
                       for fid, act in spread.activation.items() if fid in extra]
                more, dropped2 = rank(new, cfg, call.floor, anchor)
                trace.counts["dropped_confidence"] += dropped2
                ranked = sorted(ranked + more, key=order_key)
            trace.count(spreading=spread.unique)
        return ranked, len(spread.activation)

    def _events(
        self, call: RetrieveCall, f_events: Future[EventsOut] | None, anchor: datetime
    ) -> tuple[list[EventCandidate], list[tuple[Any, ...]]]:
        event_signals: dict[str, dict[str, float]] = {}
        event_rows: list[tuple[Any, ...]] = []
        call.trace.timings["events"] = 0.0
        if f_events is not None:
            event_signals, event_rows, call.trace.timings["events"], swept = f_events.result()
            if swept is not None:
                sweep_merged.with_turns(call, swept)
        known = {row[0] for row in event_rows}
        for row in call.subject_rows:  # the subject sweep's turns (ADR-0025)
            event_signals.setdefault(row[0], {})["subject"] = 1.0
            if row[0] not in known:
                event_rows = [*event_rows, row]
        call.trace.count(events=len(event_rows))
        return rank_events(event_rows, event_signals, call.cfg, call.floor, anchor), event_rows

    def _fuse(
        self, call: RetrieveCall, ranked: list[Candidate], events: list[EventCandidate], anchor: datetime
    ) -> tuple[list[Candidate], list[EventCandidate]]:
        """Facts and turns in one reciprocal-rank fusion of the signals' rankings (ADR-0009),
        then the time and diversity levers when switched on (ADR-0021)."""
        with call.trace.stage("fuse"):
            ranked, events, counts = fuse_candidates(call.lists, call.cfg.fusion.rrf_weights, call.cfg.fusion.rrf_k, ranked, events,
                                                     **self._fusion_settings(call, ranked, anchor))
        call.trace.count(**counts)
        return ranked, events

    def _fusion_settings(self, call: RetrieveCall, ranked: list[Candidate], anchor: datetime) -> dict[str, Any]:
        """The lists only the formula's ranking gives (once per call: a second fusion gets the
        formula's order, not its own) and the call's fusion arguments beside the lists."""
        cfg = call.cfg
        if call.windows is None:
            call.windows = time_windows(call.query, anchor) if cfg.fusion.time_boost > 0.0 else []
            if call.windows:
                call.trace.note(time_windows=[str(w) for w in call.windows])
        if "fact_formula" not in call.lists:
            call.lists["fact_formula"] = (FACT, [c.fact_id for c in ranked])
            linked = [c for c in ranked if max(c.signals.get("graph", 0.0), c.signals.get("spreading", 0.0)) > 0.0]
            linked.sort(key=lambda c: (-max(c.signals.get("graph", 0.0), c.signals.get("spreading", 0.0)), c.fact_id))
            call.lists["fact_graph"] = (FACT, [c.fact_id for c in linked])
        return {"diversity_penalty": cfg.fusion.diversity_penalty, "time_windows": call.windows,
                "time_boost": cfg.fusion.time_boost, "diversity_free": cfg.fusion.diversity_free,
                "diversity_start": cfg.fusion.diversity_start,
                "tail_lists": subject_sweep.PERSON_LISTS + tail_lists.TAIL_LISTS,
                "tail_start": cfg.sweeps.person_lists_from, "memo": call.placements}

    def _top_units(
        self, call: RetrieveCall, ranked: list[Candidate], events: list[EventCandidate], anchor: datetime, n: int
    ) -> list[tuple[str, str]]:
        """The first fusion's top ``n`` (the tail lists' anchors) from its head's placement
        (``fusion.head_units``); the full fusion only when the top reaches below the head."""
        settings = self._fusion_settings(call, ranked, anchor)
        units = head_units(call.lists, call.cfg.fusion.rrf_weights, call.cfg.fusion.rrf_k, ranked, events, n, **settings)
        if units is not None:
            return units
        fused, fused_events, _ = fuse_candidates(call.lists, call.cfg.fusion.rrf_weights, call.cfg.fusion.rrf_k,
                                                 ranked, events, **settings)
        return tail_lists.top_units(fused, fused_events, n)

    def _tail(
        self, call: RetrieveCall, candidates: list[Candidate], candidate_events: list[EventCandidate], anchor: datetime
    ) -> tuple[list[Candidate], list[EventCandidate]]:
        """ADR-0037: the tail lists (``fact_feedback`` / ``message_feedback``,
        ``message_neighbour``) from the top of the fusion of the other lists, their new facts
        and turns hydrated as candidates, then the fusion over every candidate plus the new
        ones, the tail lists counted below ``person_lists_from``. The top comes from the head's
        placement, which the final fusion then reuses (ADR-0041): one fusion per call, not two."""
        cfg, trace = call.cfg, call.trace
        qvec = call.query_vector()
        out = tail_lists.TailOut()
        sources = {c.fact_id: c.row.source_message_ids for c in candidates}
        turn_rows: dict[str, tuple[Any, ...]] = {}
        with trace.stage("tail_lists"), self.pool.connection() as conn:
            if qvec is not None and tail_lists.enabled(cfg.fusion.rrf_weights, tail_lists.FEEDBACK_LISTS):
                fb = tail_lists.feedback(
                    conn, call.agent_id, qvec, self._top_units(call, candidates, candidate_events, anchor,
                                                               cfg.tail_lists.feedback_depth),
                    beta=cfg.tail_lists.feedback_beta, as_of=call.as_of, min_confidence=cfg.filters.min_confidence,
                    limit=cfg.candidates.candidate_pool, ef_search=cfg.candidates.hnsw_ef_search, exact_rows=self.exact_search_rows,
                    scope=call.scope)
                out.fact_ids, out.message_ids = fb.fact_ids, fb.message_ids
            if tail_lists.enabled(cfg.fusion.rrf_weights, tail_lists.NEIGHBOUR_LISTS):
                top = self._top_units(call, candidates, candidate_events, anchor, cfg.tail_lists.neighbour_depth)
                anchors = tail_lists.anchor_turns(top, sources)
                how = cfg.tail_lists.neighbour_speakers
                if how == "named-list":
                    how = "named" if subject_sweep.is_list_question(call.query) else "all"
                named = call.subject_speakers if how != "all" else ()
                near = tail_lists.neighbours(conn, call.agent_id, anchors, cfg.tail_lists.neighbour_span, call.as_of, qvec,
                                             named, call.scope)
                first, then = tail_lists.by_speaker(near.pairs, cfg.tail_lists.neighbour_span, how if named else "all")
                ordered = tail_lists.order_neighbours(anchors, first, cfg.tail_lists.neighbour_order)
                seen = set(ordered)
                ordered += [m for m in tail_lists.order_neighbours(anchors, then, cfg.tail_lists.neighbour_order)
                            if m not in seen]
                out.neighbour_ids = ordered[: cfg.candidates.candidate_pool]
                turn_rows = near.rows
            ranked, events = list(candidates), list(candidate_events)
            known_facts = {c.fact_id for c in ranked}
            new_fact_ids = [f for f in out.fact_ids if f not in known_facts]
            if new_fact_ids:
                rows = signals.hydrate_facts(conn, call.agent_id, new_fact_ids, qvec, call.scope)
                more, _ = rank([Candidate(rows[f], {}) for f in new_fact_ids if f in rows], cfg, call.floor, anchor)
                ranked += more
            known_events = {e.message_id for e in events}
            new_ids = [m for m in dict.fromkeys(out.message_ids + out.neighbour_ids) if m not in known_events]
            if new_ids:
                missing = [m for m in new_ids if m not in turn_rows]  # the feedback list's turns
                rows_ = [turn_rows[m] for m in new_ids if m in turn_rows]
                rows_ += signals.message_rows(conn, call.agent_id, missing, qvec, call.scope) if missing else []
                events += rank_events(rows_, {m: {"listed": 1.0} for m in new_ids}, cfg, call.floor, anchor)
        call.lists["fact_feedback"] = (FACT, out.fact_ids)
        call.lists["message_feedback"] = (EVENT, out.message_ids)
        call.lists["message_neighbour"] = (EVENT, out.neighbour_ids)
        trace.count(feedback_facts=len(out.fact_ids), feedback_messages=len(out.message_ids),
                    neighbour_messages=len(out.neighbour_ids))
        return self._fuse(call, ranked, events, anchor)

    def _decomposed(
        self, call: RetrieveCall, ranked: list[Candidate], events: list[EventCandidate], anchor: datetime
    ) -> tuple[list[Candidate], list[EventCandidate]]:
        """Lever (b) of ADR-0021: the question's parts, each through the same stages, fused
        with the whole question's ranking by RRF (``decompose``)."""
        parts = sub_queries(call.query)
        call.trace.note(sub_queries=parts)
        if not parts:
            return ranked, events
        runs: list[tuple[list[Candidate], list[EventCandidate]]] = [(ranked, events)]
        with call.trace.stage("decompose"):
            for part in parts:
                sub = self._prepare(call.agent_id, part, call.cfg, call.as_of, analyze_query(part),
                                    Trace(part, part), time.perf_counter(), call.scope)
                with self.pool.connection() as conn:
                    _, sub_anchor, sub_ranked, _, f_events = self._fact_stages(sub, conn)
                sub_events, _ = self._events(sub, f_events, sub_anchor)
                runs.append(self._fuse(sub, sub_ranked, sub_events, sub_anchor))
            facts, evs = fuse_runs(runs, call.cfg.fusion.rrf_k)
        return facts, evs

    def _prefetch_patterns(self, call: RetrieveCall, candidates: list[Candidate]) -> Future[signals.PatternsNear] | None:
        """The patterns of every candidate fact, on a worker beside the last stages (ADR-0041);
        ``_patterns`` then picks those of the facts it returns without a round trip."""
        if call.cfg.sizes.topk_patterns <= 0 or call.scope is not None:
            return None
        return self._workers.submit(self._patterns_near, call, [c.fact_id for c in candidates])

    def _patterns_near(self, call: RetrieveCall, candidate_ids: list[str]) -> signals.PatternsNear:
        with self._workers.connection() as conn:
            return signals.prefetch_patterns(conn, call.agent_id, candidate_ids, call.words, call.as_of)

    def _patterns(
        self, call: RetrieveCall, facts: list[ScoredFact], events: list[ScoredEvent],
        f_near: Future[signals.PatternsNear] | None = None,
    ) -> list[ScoredPattern]:
        # a pattern sums up facts across the memory, whatever session they came from: a
        # narrowed call shows none (ADR-0047)
        if call.cfg.sizes.topk_patterns <= 0 or not (facts or events) or call.scope is not None:
            return []
        fact_ids = [f.fact_id for f in facts]
        found = None if f_near is None else signals.patterns_from(f_near.result(), fact_ids, call.words,
                                                                 call.cfg.sizes.topk_patterns)
        if found is None:  # no worker, or a returned fact the prefetch was not asked about
            with self.pool.connection() as conn:
                found = signals.patterns_for(conn, call.agent_id, fact_ids, call.words, call.cfg.sizes.topk_patterns,
                                             call.as_of)
        return [ScoredPattern(pattern_id=pid, text=text, score=round(conf, 6), supporting_fact_ids=support)
                for pid, text, conf, support, _overlap in found]


def _vector_or_none(f_vec: Future[tuple[str, float]]) -> str | None:
    """An embedding future's vector, ``None`` when it failed (the sweep then reports the error)."""
    try:
        return f_vec.result()[0]
    except Exception:
        return None
