"""The LLM write path against a REAL model (issue 9 item 6); skipped unless one is configured.

Run it with an OpenAI-compatible endpoint (e.g. ``../shared/tools/local-llm/``, a 1.5B model
on this machine)::

    ENGRAMDB_LLM_BASE_URL=http://127.0.0.1:8089/v1 ENGRAMDB_LLM_API_KEY=local \
    ENGRAMDB_LLM_MODEL=local ENGRAMDB_LLM_TIMEOUT_SEC=180 \
        python -m pytest -m llm tests/integration/test_llm_integration.py

Why structure only: a small model's answers vary between runs (even at temperature 0) and it
makes mistakes, so asserting exact facts would make the test flaky without telling us
whether the *path* works. What must hold whatever the model says: every message is recorded
and processed with the LLM's provenance; simple first-person statements yield a valid
extraction (no error) whose facts have text, an entity and this message as their source; a
truncated answer (forced here by a tiny ``max_tokens``, so the real server really cuts it)
loses nothing — the message, the error and the partial output are all in the log.

Real PostgreSQL and projectors as everywhere else; the embedder is the hashing one, because
this test is about extraction, not ranking.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from engramdb.infra.providers.factory import make_llm
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.infra.settings import Settings
from engramdb.services.memory.facade import Memory

pytestmark = [
    pytest.mark.llm,
    pytest.mark.skipif(
        not os.environ.get("ENGRAMDB_LLM_BASE_URL"),
        reason="needs a real LLM: set ENGRAMDB_LLM_BASE_URL (see ../shared/tools/local-llm/)",
    ),
]

SIMPLE_STATEMENTS = (
    ("m1", "I live in Lisbon and I work as a nurse at Santa Maria hospital."),
    ("m2", "My sister Carla has two dogs."),
    ("m3", "I started learning the piano last month."),
)


class TinyBudget:
    """The real provider with every answer bounded at a few tokens: a genuine truncation by
    the server (``finish_reason == "length"``), not a simulated one."""

    def __init__(self, inner: Any, max_tokens: int = 5) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "llm")
        self.max_tokens = max_tokens

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        temperature: float = 0,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> str:
        return str(
            self.inner.complete(
                messages,
                temperature=temperature,
                response_format=response_format,
                max_tokens=self.max_tokens,
            )
        )


@pytest.fixture
def settings() -> Settings:
    return Settings(llm_max_retries=0)  # one call per attempt: a slow model is not paid twice


def _open(env: dict[str, str], settings: Settings, llm: Any) -> Memory:
    return Memory.open(settings, env=env, embedder=HashEmbedder(384), llm=llm, quiet=True)


@pytest.fixture
def memory(fresh_schema: Any, settings: Settings) -> Iterator[Memory]:
    _schema, env = fresh_schema("llm")
    llm = make_llm(settings)
    assert llm is not None
    with _open(env, settings, llm) as mem:
        yield mem


def test_simple_statements_give_valid_sourced_facts(memory: Memory, agent_id: str) -> None:
    last = None
    for message_id, text in SIMPLE_STATEMENTS:
        result = memory.write(agent_id, text, speaker="Ana", message_id=message_id)
        assert result.extraction_error is None, f"{message_id}: {result.extraction_error}"
        assert result.llm_calls >= 1
        record = memory.app.message_record(agent_id, message_id)
        assert record is not None and record.processed and record.text == text
        events = list(memory.app.events.get(record.id))
        processed = events[-1]
        assert processed.error is None and processed.raw_output  # the model's answer is kept
        assert processed.extractor["extractor"] == "llm" and processed.extractor["prompt_version"]
        facts = record.extraction["facts"] if record.extraction else []
        assert facts, f"{message_id}: no fact from a plain statement: {processed.raw_output}"
        for fact in facts:
            assert fact["text"].strip() and fact["entity"].strip()
        last = result
    assert last is not None
    memory.wait_for_projections(last.position)

    stored = [f for f in memory.facts_as_of(agent_id, datetime.now(UTC)) if f.status == "active"]
    assert stored
    written = {message_id for message_id, _ in SIMPLE_STATEMENTS}
    for fact in stored:
        assert fact.text.strip() and fact.entity_key.strip()
        assert fact.source_message_ids and set(fact.source_message_ids) <= written
    # every statement left at least one fact behind (none was silently dropped)
    assert {m for f in stored for m in f.source_message_ids} == written

    hits = memory.retrieve(agent_id, "Where does Ana live?", config_overrides={"min_score": 0.0})
    assert hits.facts and all(set(f.source_message_ids) <= written for f in hits.facts)


def test_a_truncated_answer_loses_nothing(
    fresh_schema: Any, settings: Settings, agent_id: str
) -> None:
    _schema, env = fresh_schema("llmcut")
    real = make_llm(settings)
    assert real is not None
    text = "I live in Lisbon and I work as a nurse."
    with _open(env, settings, TinyBudget(real)) as mem:
        result = mem.write(agent_id, text, speaker="Ana", message_id="cut")
        assert result.extraction_error and "max_tokens" in result.extraction_error
        assert result.decisions == []
        record = mem.app.message_record(agent_id, "cut")
        assert record is not None and record.processed and record.text == text
        processed = list(mem.app.events.get(record.id))[-1]
        assert result.extraction_error in (processed.error or "")
        assert processed.raw_output is not None  # the partial answer is kept for the audit
        mem.wait_for_projections(result.position)
        with mem.pool.connection() as conn:
            row = conn.execute(
                "SELECT text, processed, extraction_error FROM mem_messages "
                "WHERE agent_id = %s AND message_id = 'cut'",
                (agent_id,),
            ).fetchone()
        assert row is not None and row[0] == text and row[1] and row[2]  # and it is readable
    # the same memory with a normal budget still works afterwards
    with _open(env, settings, real) as mem:
        again = mem.write(agent_id, "My sister Carla has two dogs.", speaker="Ana")
        assert again.extraction_error is None and again.decisions
