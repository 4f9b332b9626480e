"""``RetrieveResult.trace``: what one retrieve call did, stage by stage.

The keys are a contract: tests, ``bench/latency/retrieve.py`` and operators read
``timings_ms`` (ms per stage), ``candidates`` (counts per signal and drop) and the notes the
stages add (plan sources, recency anchor, reranker outcome, format budget). Stages write
through this helper so a stage's timing is taken the same way everywhere.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def ms(start: float) -> float:
    """Milliseconds since ``start`` (a ``time.perf_counter()`` value), to the microsecond."""
    return round((time.perf_counter() - start) * 1000.0, 3)


class Trace:
    """Builds the trace dict of one call (``data``), in the order the stages run."""

    def __init__(self, query: str, sanitized: str) -> None:
        self.data: dict[str, Any] = {
            "timings_ms": {},
            "candidates": {},
            "query_chars": len(query),
            "query_truncated": len(sanitized) < len(" ".join(query.split())),
        }

    @property
    def timings(self) -> dict[str, float]:
        timings: dict[str, float] = self.data["timings_ms"]
        return timings

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = self.data["candidates"]
        return counts

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as ``timings_ms[name]`` (not recorded if the block raises)."""
        start = time.perf_counter()
        yield
        self.timings[name] = ms(start)

    def note(self, **values: Any) -> None:
        """Top-level trace entries (``keyword_words``, ``recency_anchor``, ...)."""
        self.data.update(values)

    def count(self, **counts: int) -> None:
        """Candidate counts (``candidates[...]``)."""
        self.counts.update(counts)
