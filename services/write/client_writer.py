"""``add_facts``: record facts a client decided, reconciled like extracted ones (ADR-0049).

Why it runs beside the write pipeline and not through it: there is no message to record and
nothing to extract, but everything after extraction is the pipeline's — its entity resolver
(fuzzy, then the LLM for an ambiguous name, memoised across conflict retries), its per-agent
lock, its group commit, and its conflict handling (drop the cached aggregate, re-decide on
fresh state, never call an LLM twice for one name). The sources are checked against the log
first, so a fact resting on a turn the agent never had is refused before anything is saved,
and the whole batch is one commit: all of it or (on a storage failure) none of it.

Not keyed: every call is a new batch (its id seeds the fact ids, so no two calls can mint
one id). Repeating a call is a reconciliation like any repetition: its facts are known, so
NOOPs (confirmed).
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime

from eventsourcing.persistence import RecordConflictError

from engramdb.domain.client_facts import CLIENT, ClientBatch, ClientFactSpec, apply_client_facts
from engramdb.domain.extraction import ExtractedEntity, ExtractedFact, Extraction
from engramdb.domain.keys import agent_aggregate_id
from engramdb.services.write.client_facts import AddFactsRequest, InvalidClientFacts
from engramdb.services.write.entity_resolution import ResolutionMemo
from engramdb.services.write.models import DecisionOut, RejectedOut, WriteResult
from engramdb.services.write.pipeline import WritePipeline


def _specs(request: AddFactsRequest, now: datetime) -> list[ClientFactSpec]:
    return [
        ClientFactSpec(
            subject=f.subject, text=f.text, valid_from=f.valid_from or now, valid_to=f.valid_to,
            sources=tuple(f.sources), attribute_key=f.attribute_key, category=f.category,
            metadata=dict(f.metadata),
        )
        for f in request.facts
    ]


def _check_sources(pipeline: WritePipeline, request: AddFactsRequest) -> None:
    for i, fact in enumerate(request.facts):
        for mid in fact.sources:
            if pipeline.app.message_record(request.agent_id, mid) is None:
                raise InvalidClientFacts(
                    f"facts[{i}].sources",
                    f"agent {request.agent_id!r} has no recorded message {mid!r:.80}",
                )


def _as_extraction(request: AddFactsRequest) -> Extraction:
    """The subjects as the resolver reads names (an extraction is its input shape)."""
    return Extraction(
        facts=[ExtractedFact(text=f.text, entity=f.subject) for f in request.facts],
        entities=[ExtractedEntity(name=f.subject, entity_type=f.entity_type) for f in request.facts],
    )


def add_client_facts(
    pipeline: WritePipeline, request: AddFactsRequest, *, via: str = "add_facts",
    extra_provenance: dict[str, object] | None = None,
) -> WriteResult:
    """Record ``request``'s facts in one commit. ``InvalidClientFacts`` for an unknown
    source; ``AgentErasedError`` for an erased agent; storage failures raise."""
    started = time.perf_counter()
    _check_sources(pipeline, request)
    now = datetime.now(UTC)
    batch_id = uuid.uuid4().hex
    batch = ClientBatch(request.agent_id, batch_id, {
        "extractor": CLIENT, "model": None, "via": via, "batch": batch_id, **(extra_provenance or {}),
    })
    specs, names, memo = _specs(request, now), _as_extraction(request), ResolutionMemo()
    text = "\n".join(f.text for f in request.facts)
    app, agent_uuid = pipeline.app, agent_aggregate_id(request.agent_id)
    conflicts = 0
    with pipeline.agent_lock(request.agent_id):
        while True:
            memory = app.agent_memory(request.agent_id)
            outcome = pipeline.resolver.resolve_all(memory, names, None, text, memo)
            report = apply_client_facts(memory, specs, outcome.resolutions, batch)
            try:
                recordings = pipeline.commits.save(memory)
                break
            except RecordConflictError:
                app.forget_cached(agent_uuid)
                conflicts += 1
                if conflicts > pipeline.config.max_conflict_retries:
                    raise
                time.sleep(pipeline.config.conflict_backoff_sec * conflicts)
            except BaseException:
                app.forget_cached(agent_uuid)
                raise
    position = recordings[-1].notification.id if recordings else 0
    return WriteResult(
        agent_id=request.agent_id, message_id=f"{CLIENT}:{batch.batch_id}", position=position,
        decisions=[DecisionOut(kind=d.kind, fact_id=d.fact_id, target_fact_id=d.target_fact_id,
                               entity_key=d.entity_key, text=d.text)
                   for d in report.decisions if d.kind != "REJECTED"],
        rejected=[RejectedOut(reason=d.reason or "", text=d.text) for d in report.rejected],
        llm_calls=memo.llm_calls, extraction_error="; ".join(outcome.errors) or None,
        conflicts=conflicts, duration_ms=(time.perf_counter() - started) * 1000.0,
    )
