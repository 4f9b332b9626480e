"""Bulk seeding of read-model rows for inspector tests and the render benchmark: N facts of
one agent (with entities, links, relationships and N/2 turns) by binary COPY, the way
``bench/latency/data.py`` loads its agents — the write path would take minutes for 100k.

Rows are shaped as the projector writes them (``mem_agents`` keyed by the agent aggregate
id, facts active or superseded in chains, sources pointing at real turns) so every inspector
page has something to show; the log holds none of it, which only the lineage page's version
list notices (it reads the log)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import psycopg

from engramdb.domain.keys import agent_aggregate_id

T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = ("river", "market", "violin", "garden", "station", "winter", "coffee", "harbour",
         "library", "mountain", "letter", "bridge", "orchard", "lantern", "meadow", "canvas")


def seed_agent(conn: psycopg.Connection, agent: str, n: int, text: str | None = None) -> None:
    """Insert ``n`` facts of ``agent`` (every tenth superseding the one before it), n/50+1
    entities with relationships, and n/2 turns; ``text``, if given, is every fact's text."""
    n_entities = max(2, n // 50 + 1)
    keys = [f"person:p{i}" for i in range(n_entities)]
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO mem_agents (aggregate_id, agent_id, opened_at) VALUES (%s, %s, %s) "
            "ON CONFLICT DO NOTHING", (agent_aggregate_id(agent), agent, T0))
        with cur.copy("COPY mem_entities (agent_id, entity_key, display_name, entity_type, "
                      "created_at) FROM STDIN") as cp:
            for i, key in enumerate(keys):
                cp.write_row((agent, key, f"Person {i}", "person", T0))
        with cur.copy("COPY mem_aliases (agent_id, alias_folded, alias, entity_key) FROM STDIN") as cp:
            for i, key in enumerate(keys):
                cp.write_row((agent, f"person {i}", f"Person {i}", key))
        with cur.copy("COPY mem_relationships (agent_id, source_key, target_key, relation_type, "
                      "strength, mentions, first_seen_at, last_seen_at) FROM STDIN") as cp:
            for i in range(n_entities):
                for j in (1, 7):
                    if i + j < n_entities:
                        cp.write_row((agent, keys[i], keys[i + j], "knows", 1.0 + (i % 4),
                                      1 + i % 3, T0, T0))
        m = max(1, n // 2)
        with cur.copy("COPY mem_messages (agent_id, message_id, session_id, speaker, text, "
                      "occurred_at, recorded_at, processed, record_id) FROM STDIN") as cp:
            for i in range(m):
                when = T0 + timedelta(minutes=2 * i)
                cp.write_row((agent, f"m{i}", f"s{i // 100}", "user",
                              text or f"turn {i} about the {WORDS[i % len(WORDS)]}", when, when,
                              True, uuid.uuid4()))
        with cur.copy(
            "COPY mem_facts (agent_id, fact_id, entity_key, fact_text, confidence, valid_from, "
            "valid_to, recorded_at, invalidated_at, status, supersedes_fact_id, superseded_by, "
            "source_message_id, source_message_ids, speaker, decided_by, event_versions) "
            "FROM STDIN"
        ) as cp:
            for i in range(n):
                when = T0 + timedelta(minutes=i)
                ended = i % 10 == 8  # superseded by the next fact
                supersedes = f"f{i - 1}" if i % 10 == 9 else None
                later = T0 + timedelta(minutes=i + 1)
                mid = f"m{min(i // 2, m - 1)}"
                cp.write_row((
                    agent, f"f{i}", keys[i % n_entities],
                    text or f"Person {i % n_entities} likes the {WORDS[i % len(WORDS)]} {i}",
                    0.9, when, later if ended else None, when, later if ended else None,
                    "superseded" if ended else "active", supersedes,
                    f"f{i + 1}" if ended else None, mid, [mid], "user",
                    '{"extractor": "seed", "model": null, "prompt_version": "seed/v1"}', [],
                ))
        with cur.copy("COPY mem_fact_entities (agent_id, fact_id, entity_key, is_primary) "
                      "FROM STDIN") as cp:
            for i in range(n):
                cp.write_row((agent, f"f{i}", keys[i % n_entities], True))
