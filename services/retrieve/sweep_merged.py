"""The subject sweep's reads that other statements do for it under a narrowing (ADR-0047):
its facts over every fact read with the semantic search's (``facts_merged``, on the request
thread), its turns over every turn read with the turn lists' (``turns_merged``, on the events
worker), and handing what those read to the sweep / the call as its own statements would.

Why a module of its own: ``subject_sweep`` finds and ranks the subject's units; deciding when
one read of the passing rows serves two searches is the narrowing's concern, and keeping it
here keeps both short."""

from __future__ import annotations

from engramdb.services.retrieve.config import RetrieveConfig
from engramdb.services.retrieve.fusion import EVENT
from engramdb.services.retrieve.signals.swept_turns import SweptTurns
from engramdb.services.retrieve.stages import RetrieveCall
from engramdb.services.retrieve.subject_sweep import (
    SWEEP_LISTS,
    Started,
    Swept,
    cap_per_group,
    enabled,
)


def facts_merged(call: RetrieveCall, started: Started | None) -> bool:
    """Whether the sweep's facts over every fact are read by the semantic search's statement
    (``signals.semantic_and_swept_facts``) instead of its own: under a selective narrowing
    both are exact searches over the same listed facts, read once that way (ADR-0047)."""
    return (started is not None and call.scope is not None and call.scope.selective
            and enabled(call.cfg.fusion.rrf_weights, SWEEP_LISTS)
            and not call.cfg.sweeps.subject_sweep_only_subject)


def with_facts(swept: Swept, rows: list[tuple[str, str]], cfg: RetrieveConfig) -> Swept:
    """``swept`` with the facts ``facts_merged`` read elsewhere: ``(fact_id, day)`` nearest
    first, capped per day and cut as ``sweep`` does."""
    if swept.error is None:
        capped = cap_per_group(rows, cfg.sweeps.subject_sweep_per_session)[: cfg.candidates.candidate_pool]
        swept.out.fact_ids = capped
    return swept


def turns_merged(call: RetrieveCall, started: Started | None, exact_rows: int) -> bool:
    """Whether the sweep's turns over every turn are read by the turn lists' statement
    (``signals.message_lists_and_swept``, on the events worker) instead of its own: both are
    exact searches over the same passing turns when the narrowing's turns are searched
    exactly (``exact_turns_when_few``), read once that way (ADR-0047)."""
    scope = call.scope
    return (started is not None and scope is not None and (scope.selective or scope.few_turns)
            and exact_rows > 0 and call.cfg.sizes.topk_events > 0 and call.cfg.scoring.ranking == "rrf"
            and enabled(call.cfg.fusion.rrf_weights, SWEEP_LISTS)
            and not call.cfg.sweeps.subject_sweep_only_subject)


def with_turns(call: RetrieveCall, turns: SweptTurns) -> None:
    """Hand the sweep's turns ``turns_merged`` read with the turn lists to the call, as
    ``apply`` hands those ``run`` reads: capped per session and cut as ``sweep`` does, their
    rows added to the sweep's (the named persons' turns') rows."""
    ids = cap_per_group(turns.nearest, call.cfg.sweeps.subject_sweep_per_session)[: call.cfg.candidates.candidate_pool]
    call.lists["message_subject"] = (EVENT, ids)
    known = {row[0] for row in call.subject_rows}
    call.subject_rows = [*call.subject_rows, *(turns.rows[i] for i in ids if i not in known)]
    call.trace.count(subject_messages=len(ids))
