"""Candidate generators (docs/spec.md §3.2), one module per signal: ``semantic``, ``keyword``,
``bm25`` (Okapi BM25 over the stored search columns, messages and facts),
``graph`` (BFS, linked facts, entity specificity), ``aggregation`` and ``messages`` (the same
semantic + keyword search over raw messages, "Relevant conversations"); ``shared`` holds the
SQL visibility / plan-setting helpers, ``hydrate`` the candidate rows and time decay,
``patterns`` the meta-observations.

Every function takes a psycopg connection and returns ids with signal scores only: vectors
never travel to Python (ARCHITECTURE lesson: the seed spent ~45% of its read time parsing
vectors). User text only ever reaches SQL as a bound parameter; LIKE patterns are escaped.

The names below are re-exported so callers keep writing ``signals.keyword_facts(...)``.
"""

from engramdb.services.retrieve.signals.aggregation import aggregation_facts
from engramdb.services.retrieve.signals.bm25 import bm25_facts, bm25_messages
from engramdb.services.retrieve.signals.graph import (
    GraphHit,
    GraphNode,
    bfs,
    entity_specificity,
    graph_facts,
    linked_with_specificity,
    strength_factor,
)
from engramdb.services.retrieve.signals.hydrate import (
    FactCandidate,
    decay,
    floored_decay,
    hydrate_facts,
)
from engramdb.services.retrieve.signals.keyword import (
    FTS_CONFIG,
    keyword_facts,
    keyword_filter,
    keyword_modes,
    keyword_params,
    keyword_words,
    match_count,
    tsquery_text,
)
from engramdb.services.retrieve.signals.messages import message_events, message_lists, message_rows
from engramdb.services.retrieve.signals.patterns import (
    PatternsNear,
    patterns_for,
    patterns_from,
    prefetch_patterns,
)
from engramdb.services.retrieve.signals.semantic import semantic_and_swept_facts, semantic_facts
from engramdb.services.retrieve.signals.shared import (
    DF_CAP,
    N_CAP,
    Narrowing,
    batch,
    custom_plans,
    escape_like,
    fact_visibility,
    message_visibility,
    narrowing_params,
    nearest_cte,
    set_hnsw,
    similarity_threshold,
)
from engramdb.services.retrieve.signals.swept_turns import SweptTurns, message_lists_and_swept

__all__ = [
    "DF_CAP",
    "FTS_CONFIG",
    "N_CAP",
    "FactCandidate",
    "GraphHit",
    "GraphNode",
    "aggregation_facts",
    "batch",
    "bfs",
    "bm25_facts",
    "bm25_messages",
    "custom_plans",
    "decay",
    "entity_specificity",
    "escape_like",
    "Narrowing",
    "fact_visibility",
    "floored_decay",
    "graph_facts",
    "hydrate_facts",
    "keyword_facts",
    "keyword_filter",
    "keyword_modes",
    "keyword_params",
    "keyword_words",
    "linked_with_specificity",
    "match_count",
    "message_events",
    "message_lists",
    "message_lists_and_swept",
    "message_rows",
    "message_visibility",
    "narrowing_params",
    "nearest_cte",
    "PatternsNear",
    "patterns_for",
    "patterns_from",
    "prefetch_patterns",
    "semantic_and_swept_facts",
    "SweptTurns",
    "semantic_facts",
    "set_hnsw",
    "similarity_threshold",
    "strength_factor",
    "tsquery_text",
]
