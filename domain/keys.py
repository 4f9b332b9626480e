"""Stable identifiers.

Ids are derived, not random, wherever the same input must land on the same record: the
agent aggregate from ``agent_id`` (so every writer finds the same one), the message record
from ``(agent_id, message_id)`` (so a redelivery collides instead of duplicating), fact ids
from the message and the fact's ordinal (so a retried decision produces the same id).
"""

from __future__ import annotations

import hashlib
import re
from uuid import NAMESPACE_URL, UUID, uuid5

from engramdb.domain.text import match_key

_NAMESPACE = uuid5(NAMESPACE_URL, "https://engramdb.dev/ns")
SELF_ENTITY_KEY = "person:user"
_NON_SLUG = re.compile(r"[^a-z0-9]+")
_SPACES = re.compile(r"\s+")
_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)


def agent_aggregate_id(agent_id: str) -> UUID:
    return uuid5(_NAMESPACE, f"agent\x00{agent_id}")


def message_record_id(agent_id: str, message_id: str) -> UUID:
    return uuid5(_NAMESPACE, f"message\x00{agent_id}\x00{message_id}")


def new_fact_id(agent_id: str, message_id: str, ordinal: int, generation: int = 0) -> str:
    """``generation``: 0 for a message's first extraction, n for its n-th reprocess (ADR-0023),
    so a re-extracted fact never reuses the id of the fact it replaces."""
    name = f"fact\x00{agent_id}\x00{message_id}\x00{ordinal}"
    if generation:
        name += f"\x00g{generation}"
    return "f_" + uuid5(_NAMESPACE, name).hex[:20]


def slugify(name: str) -> str:
    slug = _NON_SLUG.sub("-", match_key(name)).strip("-")
    return slug or "unnamed"


def entity_key(entity_type: str, name: str) -> str:
    entity_type = slugify(entity_type or "thing").replace("-", "_")
    return f"{entity_type}:{slugify(name)}"


def self_entity_key(speaker: str | None) -> str:
    """The speaker's own entity: first person in a message refers to it."""
    if not speaker or match_key(speaker) in {"user", "me", "eu"}:
        return SELF_ENTITY_KEY
    return entity_key("person", speaker)


def fact_fingerprint(entity_key_: str, text: str) -> str:
    """Content identity of a fact, for NOOP detection (same subject, same statement)."""
    normal = _SPACES.sub(" ", _PUNCT.sub(" ", match_key(text))).strip()
    return hashlib.sha1(f"{entity_key_}\x00{normal}".encode()).hexdigest()[:16]
