"""Record an LLM's answers once, replay them later without calling the model (issue 26).

Why: a real local model costs ~30 s per extraction call on these machines (a 150-turn
LoCoMo slice is over an hour), and its answers are not exactly reproducible even at
temperature 0. engramdb's log already keeps every extraction answer (``Processed.raw_output``),
but a benchmark starts from an empty database each run; the cassette keeps the answers
beside the results so a later run — after a post-processing, resolution or ranking change —
replays the *same* answers in seconds. A change of the prompt needs a new recording.

File: JSON lines, one per call: ``exact`` (hash of the whole request), ``loose`` (hash of
the system prompt and the message part of the request: the known-facts context shown to the
extractor depends on earlier decisions, which a replay with changed post-processing may
make differently), ``answer`` or ``error``, ``seconds``, ``prompt_tokens``,
``completion_tokens``, ``finish_reason`` (and ``partial``: the text of a cut answer). Replay answers by ``exact`` first, then by
``loose`` (each recorded answer used once per key, in order); a request found under neither
raises :class:`NotRecorded` (not an outage: the extraction records the error and the run
counts it), never a silent call to a model. Recording into an existing file *resumes* it:
the answers already there are used first, so an interrupted recording is not paid twice.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections import defaultdict, deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engramdb.domain.ports import LLMProvider


class NotRecorded(RuntimeError):
    """The replayed cassette has no answer for this request."""


class RecordedError(RuntimeError):
    """The recorded call failed; replay fails the same way (non-transient), with the partial
    answer of a cut call (``partial_output``, as ``ProviderTruncated`` carries it)."""

    def __init__(self, message: str, partial_output: str | None = None) -> None:
        super().__init__(message)
        self.partial_output = partial_output


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]


def request_keys(messages: Sequence[dict[str, Any]], response_format: dict[str, Any] | None) -> tuple[str, str]:
    """``(exact, loose)`` keys of one chat request (see the module docstring)."""
    schema = json.dumps(response_format, sort_keys=True) if response_format else ""
    exact = _digest(json.dumps(list(messages), sort_keys=True, ensure_ascii=False), schema)
    system = "".join(str(m.get("content", "")) for m in messages if m.get("role") == "system")
    user = str(messages[-1].get("content", "")) if messages else ""
    head = user.split("\n", 2)[:1]  # "Speaker: …" of the extraction prompt
    marker = user.rfind("Message:")
    tail = user[marker:] if marker >= 0 else user
    return exact, _digest(system, *head, tail)


class CassetteLLM:
    """An ``LLMProvider`` that records the inner one's answers, or replays a recording."""

    def __init__(self, path: str | Path, mode: str, inner: LLMProvider | None = None) -> None:
        if mode not in ("record", "replay"):
            raise ValueError("mode must be 'record' or 'replay'")
        if mode == "record" and inner is None:
            raise ValueError("recording needs an LLM (set ENGRAMDB_LLM_BASE_URL / _API_KEY)")
        self.path = Path(path)
        self.mode = mode
        self.inner = inner
        self._lock = threading.Lock()
        self._usage: dict[str, Any] = {}
        self.calls = 0
        self.misses = 0
        self.entries: list[dict[str, Any]] = []
        self._exact: dict[str, deque[dict[str, Any]]] = defaultdict(deque)
        self._loose: dict[str, deque[dict[str, Any]]] = defaultdict(deque)
        self.resumed = 0
        if self.path.exists():  # replay; or resume an interrupted recording from its answers
            for line in self.path.read_text("utf-8").splitlines():
                if line.strip():
                    entry = json.loads(line)
                    if "answer" not in entry and mode == "record":
                        continue  # a failed call is asked again when resuming
                    self._drop_superseded_error(entry["exact"])
                    self.entries.append(entry)
                    self._exact[entry["exact"]].append(entry)
                    self._loose[entry["loose"]].append(entry)
        if mode == "replay":
            self.name = str(self.entries[0].get("model", "replay")) if self.entries else "replay"
        else:
            assert inner is not None
            self.name = inner.name
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if hasattr(inner, "on_usage"):
                inner.on_usage = self._usage.update

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        temperature: float = 0,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> str:
        exact, loose = request_keys(messages, response_format)
        self.calls += 1
        if self.mode == "replay":
            return self._replay(exact, loose)
        if self.entries:  # resuming: answers already recorded are not asked again
            try:
                answer = self._replay(exact, loose, count_miss=False)
                self.resumed += 1
                return answer
            except NotRecorded:
                pass
        assert self.inner is not None
        entry: dict[str, Any] = {"exact": exact, "loose": loose, "model": self.name,
                                 "max_tokens": max_tokens}
        started = time.perf_counter()
        self._usage.clear()
        try:
            answer = self.inner.complete(messages, temperature=temperature,
                                         response_format=response_format, max_tokens=max_tokens)
            entry["answer"] = answer
            return answer
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
            partial = getattr(exc, "partial_output", None)
            if isinstance(partial, str):
                entry["partial"] = partial  # a cut answer: what the model did write
            raise
        finally:
            entry["seconds"] = round(time.perf_counter() - started, 3)
            entry.update({k: self._usage.get(k) for k in
                          ("prompt_tokens", "completion_tokens", "finish_reason")})
            with self._lock, self.path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def _drop_superseded_error(self, exact: str) -> None:
        """A call that failed and was asked again when a recording resumed: the new answer
        replaces the failure (a replay would otherwise meet the failure first)."""
        queue = self._exact.get(exact)
        failed = next((e for e in queue or () if "error" in e), None)
        if failed is not None and queue is not None:
            queue.remove(failed)
            self._loose[failed["loose"]].remove(failed)
            self.entries.remove(failed)

    def _replay(self, exact: str, loose: str, count_miss: bool = True) -> str:
        with self._lock:
            for index, key in ((self._exact, exact), (self._loose, loose)):
                queue = index.get(key)
                if queue:
                    entry = queue.popleft()
                    other = self._loose if index is self._exact else self._exact
                    other_queue = other.get(entry["loose" if index is self._exact else "exact"])
                    if other_queue and entry in other_queue:
                        other_queue.remove(entry)
                    break
            else:
                self.misses += int(count_miss)
                raise NotRecorded("no recorded LLM answer for this request (cassette replay)")
        if "error" in entry:
            raise RecordedError(f"recorded call failed: {entry['error']}", entry.get("partial"))
        return str(entry["answer"])


def summary(path: str | Path) -> dict[str, Any]:
    """Seconds and tokens of a recording (what the replayed run cannot measure itself)."""
    rows = [json.loads(line) for line in Path(path).read_text("utf-8").splitlines() if line.strip()]
    from statistics import fmean

    def pct(values: list[float], q: float) -> float | None:  # nearest rank
        if not values:
            return None
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]

    secs = [float(r["seconds"]) for r in rows]
    out_tokens = [int(r["completion_tokens"]) for r in rows if r.get("completion_tokens") is not None]
    in_tokens = [int(r["prompt_tokens"]) for r in rows if r.get("prompt_tokens") is not None]
    return {
        "calls": len(rows), "errors": sum(1 for r in rows if "error" in r),
        "seconds_p50": pct(secs, 50), "seconds_p95": pct(secs, 95),
        "seconds_mean": round(fmean(secs), 3) if secs else None,
        "prompt_tokens_mean": round(fmean(in_tokens), 1) if in_tokens else None,
        "completion_tokens_mean": round(fmean(out_tokens), 1) if out_tokens else None,
        "completion_tokens_max": max(out_tokens) if out_tokens else None,
        "truncated": sum(1 for r in rows if r.get("finish_reason") == "length"),
    }
