"""The read pipeline (docs/spec.md §3): ``Retriever(pool, embedder, llm=None).retrieve(agent_id, query)``.

Modules: ``config`` (every knob), ``models`` (plan/result shapes), ``planner`` (deterministic
plan), ``signals`` (SQL candidate generators), ``rank`` (merge & score), ``spreading_activation``
(spreading activation), ``rerank`` (LLM judge), ``formatter`` (context string),
``pipeline`` (orchestration), ``stages`` (the pool-free stages), ``trace`` (the per-call
trace). Decisions: ADR 0006.
"""

from engramdb.services.retrieve.config import RetrieveConfig, UnknownConfigKey
from engramdb.services.retrieve.models import (
    PlannedEntity,
    RetrievalPlan,
    RetrieveRequest,
    RetrieveResult,
    ScoredEvent,
    ScoredFact,
    ScoredPattern,
)
from engramdb.services.retrieve.pipeline import Retriever

__all__ = [
    "PlannedEntity",
    "RetrievalPlan",
    "RetrieveConfig",
    "RetrieveRequest",
    "RetrieveResult",
    "Retriever",
    "ScoredEvent",
    "ScoredFact",
    "ScoredPattern",
    "UnknownConfigKey",
]
