"""The ranked lists that reciprocal-rank fusion (``ranking="rrf"``, ADR-0009) reads besides
the spec's signals: BM25 over facts and over conversation turns, and the turns' nearest
neighbours. Each returns ids best first plus the candidate signals the formula stages use,
so the rest of the pipeline (hydration, rerank, format) is shared by both rankings."""

from __future__ import annotations

from typing import Any

from engramdb.services.retrieve import signals
from engramdb.services.retrieve.fusion import EVENT, FACT
from engramdb.services.retrieve.hedges import without_hedges
from engramdb.services.retrieve.stages import RetrieveCall


def _normalised(found: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """BM25 scores divided by the best one: the [0, 1] keyword signal the formula expects."""
    top = max((score for _, score in found), default=0.0)
    return [(i, score / top if top > 0 else 0.0) for i, score in found]


def keyword_query(call: RetrieveCall) -> str:
    """The text BM25 scores: the query, without hedge words when ``drop_hedges`` (ADR-0021)."""
    return without_hedges(call.query) if call.cfg.fusion.drop_hedges else call.query


def bm25_fact_signal(conn: Any, call: RetrieveCall) -> list[tuple[str, float]]:
    """Facts by BM25 over their subject and text (``fact_keyword``), as keyword signals."""
    found = signals.bm25_facts(conn, call.agent_id, keyword_query(call), call.as_of, call.cfg.filters.min_confidence,
                               call.cfg.candidates.candidate_pool, scope=call.scope)
    call.lists["fact_keyword"] = (FACT, [fid for fid, _ in found])
    return _normalised(found)


def message_bm25(conn: Any, call: RetrieveCall) -> list[tuple[str, float]]:
    """BM25's best turns (``message_keyword``), id and score: the part of ``message_signals``
    that needs no vector, read while the question is still being embedded (ADR-0042)."""
    return signals.bm25_messages(conn, call.agent_id, keyword_query(call), call.as_of,
                                 call.cfg.candidates.candidate_pool, scope=call.scope)


def message_signals(
    conn: Any, call: RetrieveCall, qvec: str | None, exact_rows: int,
    bm25_found: list[tuple[str, float]] | None = None,
) -> tuple[dict[str, dict[str, float]], list[tuple[Any, ...]]]:
    """Turns by cosine (``message_semantic``) and by BM25 over speaker and text
    (``message_keyword``): their signals and rows, in ``message_events``' shapes, from one
    statement (``message_lists``, ADR-0031); ``bm25_found``: ``message_bm25``'s, already read."""
    sig, rows, found = signals.message_lists(conn, call.agent_id, qvec, keyword_query(call), call.cfg,
                                             call.floor, call.as_of, exact_rows,
                                             call.small.get("mem_messages"), bm25_found=bm25_found,
                                             scope=call.scope)
    return _as_signals(call, sig, rows, found)


def message_signals_and_swept(
    conn: Any, call: RetrieveCall, qvec: str | None, sweep_vec: str, sweep_fetch: int,
    bm25_found: list[tuple[str, float]] | None = None,
) -> tuple[dict[str, dict[str, float]], list[tuple[Any, ...]], signals.SweptTurns]:
    """``message_signals`` and the subject sweep's turns from one read of the passing turns
    (``signals.message_lists_and_swept``; ``sweep_merged.turns_merged`` says when)."""
    assert call.scope is not None
    sig, rows, found, swept = signals.message_lists_and_swept(
        conn, call.agent_id, qvec, sweep_vec, keyword_query(call), call.cfg, call.floor, call.as_of, call.scope,
        sweep_fetch, bm25_found=bm25_found)
    sig, rows = _as_signals(call, sig, rows, found)
    return sig, rows, swept


def _as_signals(call: RetrieveCall, sig: dict[str, dict[str, float]], rows: list[tuple[Any, ...]],
                found: list[tuple[str, float]]) -> tuple[dict[str, dict[str, float]], list[tuple[Any, ...]]]:
    """The two turn lists into ``call.lists`` and BM25's normalised scores into the signals."""
    by_cosine = sorted(((mid, s["cosine"]) for mid, s in sig.items() if "cosine" in s),
                       key=lambda t: (-t[1], t[0]))
    call.lists["message_semantic"] = (EVENT, [mid for mid, _ in by_cosine])
    call.lists["message_keyword"] = (EVENT, [mid for mid, _ in found])
    for mid, score in _normalised(found):
        sig.setdefault(mid, {})["keyword"] = score
    return sig, rows
