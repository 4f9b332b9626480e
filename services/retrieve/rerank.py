"""Rerank (docs/spec.md §3.5): an LLM judges the top candidates for the query's intent.

``final = formula × (floor + w × reranker)``, ``floor = 1 − w``; a reranker score under
``min_reranker_score`` vetoes the item (final 0). Facts *and* conversation turns are judged
in one call, so a query the memory cannot answer ends with no facts and no conversations.
The call runs on a daemon thread that is abandoned at ``reranker_timeout_sec`` (a blocking
provider cannot be cancelled from outside; abandoning is the enforceable equivalent).
Any failure — timeout, provider error, unparseable answer — keeps the original ranking.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engramdb.domain.ports import LLMProvider
from engramdb.infra.llm_timeout import call_with_timeout as _call_with_timeout
from engramdb.infra.prompt_files import load_prompt as _load_prompt
from engramdb.services.extraction.llm_budget import rerank_max_tokens

PROMPT_VERSION = "rerank/v1"
_JSON_OBJECT = re.compile(r"\{.*\}", re.S)  # inside code fences / prose
_JSON_ARRAY = re.compile(r"\[.*\]", re.S)
MAX_ITEM_CHARS = 400


class RerankFailed(RuntimeError):
    pass


def load_prompt(version: str = PROMPT_VERSION) -> tuple[str, str]:
    """(system, user) templates of ``infra/prompts/<name>_<vN>.md``."""
    prompt = _load_prompt(version)
    return prompt.system, prompt.user


def build_messages(query: str, items: Sequence[str]) -> list[dict[str, str]]:
    lines = "\n".join(
        f"[{i}] " + " ".join(text.split())[:MAX_ITEM_CHARS] for i, text in enumerate(items, start=1)
    )
    values = {"query": " ".join(query.split()), "items": lines}
    system, user = _load_prompt(PROMPT_VERSION).render(values)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def parse_scores(answer: str, n: int) -> list[float]:
    """Scores for items 1..n from ``{"scores": {"1": 0.9}}`` (also accepts a list of
    ``{"id", "score"}`` or a bare list of n numbers). Missing items count as 0."""
    data: Any = None
    text = (answer or "").strip()
    for candidate in (text, *(m.group(0) for m in (_JSON_OBJECT.search(text), _JSON_ARRAY.search(text)) if m)):
        try:
            data = json.loads(candidate)
            break
        except ValueError:
            continue
    else:
        raise RerankFailed(f"reranker answer is not JSON: {text[:120]!r}")
    if isinstance(data, dict):
        data = data.get("scores", data)
    found: dict[int, float] = {}
    if isinstance(data, dict):
        items = list(data.items())
    elif isinstance(data, list) and all(isinstance(x, (int, float)) for x in data):
        items = [(i, x) for i, x in enumerate(data, start=1)]
    elif isinstance(data, list):
        items = [(d.get("id"), d.get("score")) for d in data if isinstance(d, dict)]
    else:
        raise RerankFailed("reranker answer has no scores")
    for key, value in items:
        try:
            index, score = int(str(key).strip("[] ")), float(value)
        except (TypeError, ValueError):
            continue
        if 1 <= index <= n and score == score:  # not NaN
            found[index] = max(0.0, min(1.0, score))
    if not found and n:
        raise RerankFailed("reranker answer scored none of the items")
    return [found.get(i, 0.0) for i in range(1, n + 1)]


@dataclass
class RerankOutcome:
    scores: list[float] | None
    status: str  # ok | timeout | error: ... | skipped
    duration_ms: float = 0.0


def call_with_timeout(
    llm: LLMProvider, messages: list[dict[str, str]], timeout: float, n_items: int = 0
) -> str:
    """The reranker's provider call, bounded by ``timeout`` (``TimeoutError`` past it) and
    by an output of ``rerank_max_tokens(n_items)`` tokens."""
    answer = _call_with_timeout(
        lambda: llm.complete(
            messages,
            temperature=0,
            response_format={"type": "json_object"},
            max_tokens=rerank_max_tokens(n_items),
        ),
        timeout,
        name="engramdb-rerank",
    )
    return str(answer)


def rerank(llm: LLMProvider, query: str, items: Sequence[str], timeout: float) -> RerankOutcome:
    import time

    if not items:
        return RerankOutcome(None, "skipped")
    start = time.perf_counter()
    try:
        answer = call_with_timeout(llm, build_messages(query, items), timeout, len(items))
        scores = parse_scores(answer, len(items))
        status = "ok"
    except TimeoutError:
        scores, status = None, "timeout"
    except Exception as exc:  # fail-safe: the original ranking stands
        scores, status = None, f"error: {type(exc).__name__}: {str(exc)[:200]}"
    return RerankOutcome(scores, status, (time.perf_counter() - start) * 1000.0)


def blend(formula: float, reranker: float, weight: float, min_reranker_score: float) -> float:
    if reranker < min_reranker_score:
        return 0.0
    return formula * ((1.0 - weight) + weight * reranker)
