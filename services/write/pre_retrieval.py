"""Pre-retrieval for informed extraction (docs/spec.md §2 step 2): what memory already knows about
the entities a message mentions, read from the projections (never the event store).

It finds known entities by alias, display name or slug among the message's 1–4-word
n-grams (plus the speaker's own entity, since first person refers to it), then loads their
profiles and their top active facts (``topk`` = 10, within a ~800-token budget), so the
extractor can say "UPDATE fact X" instead of adding a duplicate.

Fail-safe by design: read models may not exist yet (fresh install, rebuild in progress) or
the database may be slow. Any failure returns ``None`` and the pipeline falls back to the
aggregate's own entity list; the failure is remembered for ``retry_after_sec`` so a missing
table does not cost a round trip per message.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from psycopg_pool import ConnectionPool

from engramdb.domain.aggregate import AgentMemory
from engramdb.domain.extraction import KnownEntity, KnownFact
from engramdb.domain.keys import match_key, self_entity_key, slugify
from engramdb.domain.text import CONTRACTED_WORD_RE, approx_tokens, ngram_spans
from engramdb.infra.read_pool import open_read_pool

log = logging.getLogger(__name__)

_MAX_NGRAM = 4
_MAX_CANDIDATE_FACTS = 60
_MAX_PROFILE_CHARS = 400  # a profile must not eat the whole 800-token budget


@dataclass
class PreRetrievalResult:
    entities: list[KnownEntity] = field(default_factory=list)
    facts: list[KnownFact] = field(default_factory=list)
    source: str = "projections"  # or "aggregate"


def message_ngrams(text: str, max_n: int = _MAX_NGRAM) -> list[str]:
    """Folded word n-grams (1..max_n) of the message: the candidate surface names."""
    words = [match_key(w) for w in CONTRACTED_WORD_RE.findall(text)]
    grams: dict[str, None] = {}
    for start, end in ngram_spans(len(words), max_n):
        grams[" ".join(words[start:end])] = None
    return list(grams)


def mentioned_in_aggregate(memory: AgentMemory, text: str, speaker: str | None) -> list[str]:
    """Entity keys of the aggregate whose alias/display name/slug occurs in ``text``."""
    grams = message_ngrams(text)
    keys: dict[str, None] = {}
    own = self_entity_key(speaker)
    if memory.has_entity(own):
        keys[own] = None
    by_slug = {key.split(":", 1)[1]: key for key in memory.entities}
    for gram in grams:
        key = memory.aliases.get(gram)
        if key is not None:
            keys[memory.canonical_entity(key)] = None
        slug_key = by_slug.get(slugify(gram))
        if slug_key is not None and len(gram) > 2:
            keys[slug_key] = None
    return [k for k in keys if memory.has_entity(k)]


def aggregate_context(memory: AgentMemory, text: str, speaker: str | None) -> PreRetrievalResult:
    """Fallback context from the aggregate alone: mentioned entities, no facts."""
    entities = []
    for key in mentioned_in_aggregate(memory, text, speaker):
        display, entity_type = memory.entities[key]
        aliases = sorted(a for a, k in memory.aliases.items() if k == key)[:5]
        entities.append(
            KnownEntity(entity_key=key, display_name=display, entity_type=entity_type, aliases=aliases)
        )
    return PreRetrievalResult(entities=entities, source="aggregate")


class PreRetrieval:
    """Reads mem_aliases / mem_entities / mem_facts through the read-side pool.

    ``source`` is that pool, lent by its owner (``Memory``; ``close()`` leaves it open), or a
    libpq conninfo for standalone use: then a small pool of its own (``max_pool_size``, on
    ``schema``) is opened on first use and closed by ``close()``. Either way each lookup runs
    in one transaction with a transaction-local ``statement_timeout``, so a slow read model
    costs at most that and the shared connections keep their settings.
    """

    def __init__(
        self,
        source: str | ConnectionPool,
        *,
        schema: str | None = None,
        topk: int = 10,
        token_budget: int = 800,
        statement_timeout_ms: int = 2000,
        retry_after_sec: float = 5.0,
        max_pool_size: int = 4,
        pool_timeout_sec: float = 5.0,
    ) -> None:
        self.conninfo = source if isinstance(source, str) else None
        self.schema = schema
        self.topk = topk
        self.token_budget = token_budget
        self.statement_timeout_ms = statement_timeout_ms
        self.retry_after_sec = retry_after_sec
        self.max_pool_size = max_pool_size
        self.pool_timeout_sec = pool_timeout_sec
        self._pool: ConnectionPool | None = None if isinstance(source, str) else source
        self._owns_pool = isinstance(source, str)
        self._pool_lock = threading.Lock()
        self._down_until = 0.0

    # ----- pool ------------------------------------------------------------------------------

    def _get_pool(self) -> ConnectionPool:
        with self._pool_lock:
            if self._pool is None:
                assert self.conninfo is not None  # only an owned pool is opened lazily
                schema = self.schema if self.schema and self.schema != "public" else None
                self._pool = open_read_pool(
                    self.conninfo, schema, max_size=self.max_pool_size, timeout=self.pool_timeout_sec
                )
            return self._pool

    def close(self) -> None:
        """Close the pool if this object opened it (a lent pool stays with its owner)."""
        if not self._owns_pool:
            return
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    # ----- query -----------------------------------------------------------------------------

    def context(
        self, agent_id: str, text: str, speaker: str | None, memory: AgentMemory | None = None
    ) -> PreRetrievalResult | None:
        """Known entities and top facts for this message, or ``None`` if unavailable."""
        if time.monotonic() < self._down_until:
            return None
        try:
            return self._context(agent_id, text, speaker, memory)
        except Exception as exc:  # noqa: BLE001 — fail-safe: extraction proceeds without it
            self._down_until = time.monotonic() + self.retry_after_sec
            log.warning("pre-retrieval unavailable (%s: %s); using the aggregate", type(exc).__name__, exc)
            return None

    def _context(
        self, agent_id: str, text: str, speaker: str | None, memory: AgentMemory | None
    ) -> PreRetrievalResult:
        grams = message_ngrams(text)
        slugs = sorted({slugify(g) for g in grams if len(g) > 2})
        own = self_entity_key(speaker)
        seed = mentioned_in_aggregate(memory, text, speaker) if memory is not None else []
        pool = self._get_pool()
        with pool.connection(timeout=self.pool_timeout_sec) as conn, conn.transaction():
            conn.execute(
                "SELECT set_config('statement_timeout', %s, true)", (str(int(self.statement_timeout_ms)),)
            )
            rows = conn.execute(
                """
                SELECT e.entity_key, e.display_name, e.entity_type, e.profile_text
                FROM mem_entities e
                WHERE e.agent_id = %(agent)s AND e.merged_into IS NULL AND (
                    e.entity_key = ANY(%(seed)s)
                    OR e.entity_key IN (SELECT a.entity_key FROM mem_aliases a
                                        WHERE a.agent_id = %(agent)s AND a.alias_folded = ANY(%(grams)s))
                    OR lower(e.display_name) = ANY(%(grams)s)
                    OR split_part(e.entity_key, ':', 2) = ANY(%(slugs)s))
                ORDER BY (e.entity_key = %(own)s) DESC, e.entity_key
                LIMIT 20
                """,
                {"agent": agent_id, "seed": [own, *seed], "grams": grams, "slugs": slugs, "own": own},
            ).fetchall()
            keys = [r[0] for r in rows]
            alias_rows = (
                conn.execute(
                    "SELECT entity_key, alias FROM mem_aliases WHERE agent_id = %s AND entity_key = ANY(%s)"
                    " ORDER BY entity_key, alias LIMIT 200",
                    (agent_id, keys),
                ).fetchall()
                if keys
                else []
            )
            fact_rows = (
                conn.execute(
                    """
                    SELECT f.fact_id, f.fact_text, f.entity_key, f.attribute_key
                    FROM mem_facts f
                    WHERE f.agent_id = %(agent)s AND f.valid_to IS NULL AND (
                        f.entity_key = ANY(%(keys)s)
                        OR f.fact_id IN (SELECT l.fact_id FROM mem_fact_entities l
                                         WHERE l.agent_id = %(agent)s AND l.entity_key = ANY(%(keys)s)))
                    ORDER BY f.importance DESC, f.recorded_at DESC
                    LIMIT %(limit)s
                    """,
                    {"agent": agent_id, "keys": keys, "limit": _MAX_CANDIDATE_FACTS},
                ).fetchall()
                if keys
                else []
            )
        aliases: dict[str, list[str]] = {}
        for key, alias in alias_rows:
            aliases.setdefault(key, []).append(alias)
        entities = [
            KnownEntity(
                entity_key=key,
                display_name=display,
                entity_type=etype,
                aliases=aliases.get(key, [])[:5],
                profile_text=(profile or "")[:_MAX_PROFILE_CHARS],
            )
            for key, display, etype, profile in rows
        ]
        facts = self._rank_facts(text, fact_rows)
        return self._within_budget(entities, facts)

    def _rank_facts(self, text: str, rows: Iterable[tuple[str, str, str, str | None]]) -> list[KnownFact]:
        """Order candidates by word overlap with the message (stable: SQL order breaks ties)."""
        words = set(message_ngrams(text, 1))
        scored = []
        for index, (fact_id, fact_text, key, attribute) in enumerate(rows):
            overlap = len(words & set(message_ngrams(fact_text, 1)))
            scored.append((-overlap, -(attribute is not None), index, fact_id, fact_text, key, attribute))
        scored.sort()
        return [
            KnownFact(fact_id=fid, text=ftext, entity_key=key, attribute_key=attr)
            for *_, fid, ftext, key, attr in scored[: self.topk]
        ]

    def _within_budget(self, entities: list[KnownEntity], facts: list[KnownFact]) -> PreRetrievalResult:
        used = 0
        kept_entities: list[KnownEntity] = []
        for ent in entities:
            cost = approx_tokens(f"{ent.entity_key} {ent.display_name} {' '.join(ent.aliases)}")
            cost += approx_tokens(ent.profile_text)
            if used + cost > self.token_budget and kept_entities:
                break
            kept_entities.append(ent)
            used += cost
        kept_facts: list[KnownFact] = []
        for fact in facts:
            cost = approx_tokens(f"[{fact.fact_id}] ({fact.entity_key}) {fact.text}")
            if used + cost > self.token_budget:
                break
            kept_facts.append(fact)
            used += cost
        return PreRetrievalResult(entities=kept_entities, facts=kept_facts)
