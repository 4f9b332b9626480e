"""Entity resolution, the pure part: self reference → exact → fuzzy → (ambiguous | new).

Names are compared as strings (folded, accent-free), never by embeddings: with e5 vectors any
two first names score 0.84–0.88, which merged the two speakers of a conversation in the
seed's SDK. The ambiguous band (0.50–0.85) is handed back to the caller, which may ask an LLM
(I/O, so not here); if that fails the caller creates a new entity — a duplicate beats lost data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from rapidfuzz import fuzz, process

from engramdb.domain.aggregate import AgentMemory
from engramdb.domain.keys import entity_key, match_key, self_entity_key

FUZZY_MERGE_THRESHOLD = 0.85
AMBIGUOUS_FLOOR = 0.50
_SELF_WORDS = {"i", "me", "myself", "eu", "mim", "user", "the user", "o usuario", "a usuaria"}

ResolutionKind = Literal["self", "exact", "fuzzy", "ambiguous", "new", "llm"]


@dataclass
class Resolution:
    name: str
    entity_type: str
    kind: ResolutionKind
    entity_key: str
    score: float = 1.0
    candidates: list[tuple[str, float]] = field(default_factory=list)  # for "ambiguous"

def resolve_name(
    memory: AgentMemory,
    name: str,
    entity_type: str,
    speaker: str | None,
    fuzzy_threshold: float = FUZZY_MERGE_THRESHOLD,
    ambiguous_floor: float = AMBIGUOUS_FLOOR,
    pending: dict[str, str] | None = None,
) -> Resolution:
    """Map a surface name to an entity key of this agent, or propose a new one.

    ``pending`` holds folded names already resolved to new keys earlier in the same message,
    so two mentions of a new name in one message become one entity.
    """
    folded = match_key(name)
    own_key = self_entity_key(speaker)
    if folded in _SELF_WORDS or (speaker and folded == match_key(speaker)):
        return Resolution(name, "person", "self", own_key)
    if pending and folded in pending:
        return Resolution(name, entity_type, "exact", pending[folded])
    aliased = memory.entity_for_alias(name)
    if aliased is not None:
        return Resolution(name, entity_type, "exact", memory.canonical_entity(aliased))
    direct = entity_key(entity_type, name)
    if memory.has_entity(direct):
        return Resolution(name, entity_type, "exact", direct)

    same_type = {
        alias: key
        for alias, key in memory.aliases.items()
        if key in memory.entities and memory.entities[key][1] == entity_type
    }
    if same_type:
        matches = process.extract(
            folded, list(same_type), scorer=fuzz.ratio, limit=3, score_cutoff=ambiguous_floor * 100
        )
        if matches:
            best_alias, best_score, _ = matches[0]
            score = best_score / 100.0
            if score >= fuzzy_threshold:
                return Resolution(name, entity_type, "fuzzy", same_type[best_alias], score)
            candidates = [(same_type[alias], s / 100.0) for alias, s, _ in matches]
            return Resolution(name, entity_type, "ambiguous", direct, score, candidates)
    return Resolution(name, entity_type, "new", direct, 0.0)
