"""The ``facts-cosine`` reference: plain cosine over the very facts engramdb stored.

Why: the raw-turn baselines (BM25 / dense / hybrid) measure whether engramdb beats indexing
the conversation. They do not say whether engramdb's *ranking* adds anything over the facts
it already holds: given the same facts, one unit per fact, would plain cosine find the
evidence as well? This reference answers that, in the same run and over the same read
model, so the only difference from engramdb is the ranking (signals, boosts, recency,
messages) — never the memory content.

Unit = one active fact of the agent (``valid_to`` and ``invalidated_at`` unset, as
retrieve sees it without ``as_of``), embedded as ``"Subject: fact"`` with the run's
embedder (``embed``, the passage side), the question with ``embed_query``; cosine, top 20.
A unit covers the fact's ``source_message_ids``, exactly as an engramdb fact does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.locomo.baselines import DenseIndex

Unit = frozenset[str]

# Active facts of one agent as retrieve reads them (same visibility and the same subject
# name and source-id rules as ``hydrate_facts``); ordered by fact id so ties are stable.
_ACTIVE_FACTS = """
SELECT f.fact_id, coalesce(e.display_name, f.entity_key), f.fact_text,
       f.source_message_id, f.source_message_ids
  FROM mem_facts f
  LEFT JOIN mem_entities e ON e.agent_id = f.agent_id AND e.entity_key = f.entity_key
 WHERE f.agent_id = %(a)s AND f.valid_to IS NULL AND f.invalidated_at IS NULL
 ORDER BY f.fact_id
"""


@dataclass(frozen=True)
class StoredFact:
    fact_id: str
    subject: str
    text: str
    source_ids: Unit

    @property
    def unit_text(self) -> str:
        return f"{self.subject}: {self.text}"


def stored_facts(memory: Any, agent_id: str) -> list[StoredFact]:
    """The agent's active facts from the read model (``memory.pool``), after ingest."""
    with memory.pool.connection() as conn:
        rows = conn.execute(_ACTIVE_FACTS, {"a": agent_id}).fetchall()
    out: list[StoredFact] = []
    for fact_id, subject, text, single, many in rows:
        ids = list(many or [])
        if single and single not in ids:
            ids.insert(0, single)
        out.append(StoredFact(str(fact_id), str(subject), str(text), frozenset(map(str, ids))))
    return out


class FactsCosineIndex:
    """Cosine over one agent's stored facts; ``rank`` returns the top-k units."""

    def __init__(self, facts: Sequence[StoredFact], embedder: Any) -> None:
        self.facts = list(facts)
        texts = [f.unit_text for f in self.facts]
        self._index = (
            DenseIndex([str(i) for i in range(len(texts))], embedder.embed(texts))
            if texts
            else None
        )

    def rank(self, query_vector: Sequence[float], k: int) -> list[Unit]:
        if self._index is None:  # an agent with no facts: nothing to rank
            return []
        order = self._index.rank(query_vector)[:k]
        return [self.facts[int(i)].source_ids for i in order]
