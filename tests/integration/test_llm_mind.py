"""Directives and emotion through a REAL model (issue 26); skipped unless one is configured.

    ENGRAMDB_LLM_BASE_URL=http://127.0.0.1:8089/v1 ENGRAMDB_LLM_API_KEY=local \
    ENGRAMDB_LLM_MODEL=local ENGRAMDB_LLM_TIMEOUT_SEC=600 \
        python -m pytest -m llm tests/integration/test_llm_mind.py

Structure and loose content only (a 1.5B model varies and errs): an instruction to the
assistant, in EN and in PT, ends up as a directive of the agent — from the model or, when it
misses it, from the offline backstop (ADR-0045) — shown in the context's "Directives" section,
never as an ordinary fact; every processed message has an emotion or honestly none, and an
emotion recorded by the call says ``llm``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from engramdb.infra.providers.factory import make_llm
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.infra.settings import Settings
from engramdb.services.extraction.llm_extractor import LLMExtractor
from engramdb.services.memory.facade import Memory

pytestmark = [
    pytest.mark.llm,
    pytest.mark.skipif(
        not os.environ.get("ENGRAMDB_LLM_BASE_URL"),
        reason="needs a real LLM: set ENGRAMDB_LLM_BASE_URL (see ../shared/tools/local-llm/)",
    ),
]


@pytest.fixture
def memory(fresh_schema: Any) -> Iterator[Memory]:
    _schema, env = fresh_schema("llmmind")
    settings = Settings()
    llm = make_llm(settings)
    assert llm is not None
    extractor = LLMExtractor(llm, timeout_sec=settings.llm_timeout_sec)
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, extractor=extractor, quiet=True) as mem:
        yield mem


@pytest.mark.parametrize("text", [
    "From now on, please keep your answers short.",
    "A partir de agora, responda sempre em português, por favor.",
])
def test_real_model_directive_en_pt(memory: Memory, agent_id: str, text: str) -> None:
    written = memory.write(agent_id, text, speaker="Ana", message_id="m1")
    assert not written.extraction_pending, written.extraction_error
    memory.wait_for_projections()
    directives = memory.list_facts(agent_id, category="directive").items
    assert directives and all(d.text.strip() for d in directives)
    assert all(f.category == "directive" for f in memory.list_facts(agent_id).items)
    assert memory.retrieve(agent_id, "what do you know?").context.startswith("Directives:\n- ")
    (message,) = memory.list_messages(agent_id).items
    assert message.processed and message.extractor and message.extractor.startswith("llm")
    assert message.emotion_detector in (None, "llm", "lexicon")
