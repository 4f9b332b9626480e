"""The retrieve filter on a turn's emotion (issue 26): ``config_overrides={"emotions": [...]}``.

The emotion is the one the extraction recorded for the message (``mem_messages.emotion``:
the LLM's reading, or the offline lexicon's — ``emotion_detector`` says which). Applied to
the candidates after ranking, before the top-k is cut: turns of another (or no) emotion are
dropped, and facts none of whose source turns has one of the emotions. One probe of the
candidates' ids; nothing runs when the filter is off (the default).
"""

from __future__ import annotations

from typing import Any

from engramdb.services.retrieve.rank import Candidate, EventCandidate
from engramdb.services.retrieve.stages import RetrieveCall as Call

_SQL = (
    "SELECT message_id FROM mem_messages WHERE agent_id = %(a)s "
    "AND message_id = ANY(%(ids)s) AND emotion = ANY(%(e)s)"
)


def apply(pool: Any, call: Call, ranked: list[Candidate],
          events: list[EventCandidate]) -> tuple[list[Candidate], list[EventCandidate]]:
    wanted = call.cfg.filters.emotions
    if not wanted:
        return ranked, events
    ids = {e.message_id for e in events} | {m for c in ranked for m in c.row.source_message_ids}
    if not ids:
        return ranked, events
    with pool.connection() as conn:
        rows = conn.execute(_SQL, {"a": call.agent_id, "ids": sorted(ids), "e": list(wanted)}).fetchall()
    matching = {r[0] for r in rows}
    kept_facts = [c for c in ranked if matching.intersection(c.row.source_message_ids)]
    kept_events = [e for e in events if e.message_id in matching]
    call.trace.count(emotion_dropped=len(ranked) + len(events) - len(kept_facts) - len(kept_events))
    return kept_facts, kept_events
