"""Which of the messages an extractor cites for its facts may become a fact's sources.

Why a check at all: ``ExtractedFact.source_message_ids`` is the extractor's claim (an LLM's
JSON, a benchmark's playback), and whatever passes ends up in ``mem_facts.source_message_ids``
and in retrieval answers. So a cited id is kept only if it is a message of the SAME agent that
was recorded before the message being processed. That check is cheap and exact: a
message record's aggregate id is derived from (agent id, message id) (``domain.keys``), so one
primary-key read per cited id answers it, and another agent's message id can never match.
Ids that are not even syntactically message ids are dropped before any lookup, and the
number of lookups per message is bounded (``MAX_CITED_LOOKUPS``).
"""

from __future__ import annotations

from datetime import datetime

from engramdb.domain.aggregate import MessageRecord
from engramdb.domain.extraction import Extraction
from engramdb.domain.keys import message_record_id
from engramdb.domain.payloads import MAX_SOURCE_MESSAGES
from engramdb.services.memory.event_log import EventLog
from engramdb.services.write.messages import is_message_id

#: Distinct cited ids looked up per message; the rest are dropped (a fact keeps at most
#: ``MAX_SOURCE_MESSAGES`` sources anyway, and a message rarely yields more than a few facts).
MAX_CITED_LOOKUPS = 4 * MAX_SOURCE_MESSAGES


def recorded_citations(
    app: EventLog,
    agent_id: str,
    message_id: str,
    recorded_at: datetime,
    extraction: Extraction,
) -> frozenset[str]:
    """The ids cited by ``extraction``'s facts that are messages of ``agent_id`` recorded
    strictly before ``recorded_at`` (the processed message's ``Recorded`` time); the message
    itself is not a citation (it is always a fact's first source)."""
    cited: list[str] = []
    for fact in extraction.facts:
        for mid in fact.source_message_ids[:MAX_SOURCE_MESSAGES]:
            if mid != message_id and mid not in cited and is_message_id(mid):
                cited.append(mid)
    verified: set[str] = set()
    for mid in cited[:MAX_CITED_LOOKUPS]:
        stored = app.recorder.select_events(message_record_id(agent_id, mid), limit=1)
        if not stored:
            continue
        first = app.mapper.to_domain_event(stored[0])
        if isinstance(first, MessageRecord.Recorded) and first.timestamp < recorded_at:
            verified.add(mid)
    return frozenset(verified)
