"""TEST DOUBLES: scripted LLM and hashing embedder. Neither is a model; both say so.

* ``ScriptedLLM`` answers from a table written by the test, keyed by the input (by default
  the content of the last user message). Asked anything else it raises
  ``NoScriptedAnswer`` instead of improvising, so a test cannot pass by accident.
* ``HashEmbedder`` is a bag-of-words hashing vectoriser: texts that share words get a
  positive cosine, texts that share none get about 0. Fast and deterministic, for tests
  that need "semantics-lite" vectors without loading a model. It knows no synonyms and no
  languages.
"""

from __future__ import annotations

import hashlib
import math
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engramdb.domain.text import WORD_RE
from engramdb.infra.providers.calibration import SIMILARITY_FLOOR

#: One scripted answer: the text to return, an exception to raise, or a list of those
#: served in turn (the last one repeats), e.g. ``[ProviderTimeout("t"), '{"ok": 1}']``.
Answer = str | BaseException | list[str | BaseException]
#: A whole script as a function of the messages (return a str or raise).
ScriptFn = Callable[[Sequence[dict[str, Any]]], str]


class NoScriptedAnswer(KeyError):
    """The ``ScriptedLLM`` was asked something its table does not cover."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "no scripted answer"


def last_user_content(messages: Sequence[dict[str, Any]]) -> str:
    """Default table key: the content of the last ``user`` message (text parts joined)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content", "")
            if isinstance(content, list):  # OpenAI content parts
                return "".join(p.get("text", "") for p in content if isinstance(p, dict))
            return str(content)
    return ""


@dataclass(frozen=True)
class ScriptedCall:
    """What the code under test sent, for assertions."""

    key: str
    messages: list[dict[str, Any]]
    temperature: float
    response_format: dict[str, Any] | None
    max_tokens: int | None


class ScriptedLLM:
    """TEST DOUBLE ``LLMProvider``: answers only what the test scripted.

    ``table`` maps a key (``key_fn(messages)``, default ``last_user_content``) to an
    ``Answer``; or ``table`` is a function of the messages. Malformed JSON is scripted by
    simply putting it in the table. Every call is recorded in ``calls`` (also the failing
    ones), so tests can assert on the prompts and on ``response_format``.
    """

    def __init__(
        self,
        table: Mapping[str, Answer] | ScriptFn,
        name: str = "scripted",
        key_fn: Callable[[Sequence[dict[str, Any]]], str] = last_user_content,
    ) -> None:
        self.name = name
        self._table = table
        self._key_fn = key_fn
        self._served: dict[str, int] = {}
        self.calls: list[ScriptedCall] = []

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        temperature: float = 0,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> str:
        key = self._key_fn(messages)
        self.calls.append(
            ScriptedCall(key, [dict(m) for m in messages], temperature, response_format, max_tokens)
        )
        if callable(self._table):
            return self._table(messages)
        if key not in self._table:
            shown = key if len(key) <= 300 else key[:300] + "..."
            raise NoScriptedAnswer(f"no scripted answer for {shown!r} ({self.name})")
        answer = self._table[key]
        if isinstance(answer, list):
            index = self._served.get(key, 0)
            self._served[key] = index + 1
            answer = answer[min(index, len(answer) - 1)]
        if isinstance(answer, BaseException):
            raise answer
        return answer


def bow_tokens(text: str) -> list[str]:
    """Lowercased, accent-stripped word tokens (``\\w+``)."""
    folded = unicodedata.normalize("NFKD", text.lower())
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return WORD_RE.findall(folded)


class HashEmbedder:
    """TEST DOUBLE ``EmbeddingProvider``: signed feature hashing of word counts, L2-normalised.

    Each token goes to bucket ``blake2b(token) % dimensions`` with a hash-derived sign (so
    collisions cancel out on average instead of piling up). A text without any word maps to
    a fixed "empty" token, so no vector is ever zero. ``embed_query`` == ``embed``.
    """

    def __init__(self, dimensions: int = 384) -> None:
        self.dimensions = dimensions
        self.model_id = "hash-bow-384" if dimensions == 384 else f"hash-bow-{dimensions}"
        self.similarity_floor = SIMILARITY_FLOOR.get(self.model_id, 0.0)

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for token in bow_tokens(text) or ["\x00empty"]:
            digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
            value = int.from_bytes(digest, "big")
            vector[value % self.dimensions] += 1.0 if (value >> 63) & 1 else -1.0
        norm = math.sqrt(sum(x * x for x in vector))
        if norm == 0.0:  # every token collided and cancelled: fall back to one bucket
            vector[0], norm = 1.0, 1.0
        return [x / norm for x in vector]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)
