"""Whether an agent is small enough for the exact nearest-row search, counted once per
retrieve (or less) instead of once per statement (ADR-0038).

Why: every nearest-row statement (semantic facts, the turns, the sweeps' facts and turns —
four to eight per retrieve) used to decide exact vs HNSW with a capped count of the agent's
rows inside the statement (``signals.shared.nearest_cte``): at 100k rows each count walks
20,001 index entries, ~1.5–2 ms, the same two counts repeated. The verdict only changes when
an agent crosses ``exact_rows`` rows, so it is counted here once per call and — when the
agent is far from the threshold — kept for a while:

- an agent with more than twice ``exact_rows`` rows is large for ``ttl`` seconds, one with at
  most half of them small for ``ttl`` seconds: to flip, the agent would have to halve or
  double within that time (and a stale verdict then only trades a little speed or HNSW's
  approximation for the exact order, never a wrong row);
- in between, the verdict is counted on every call, so near the threshold each call decides
  from the data exactly as the statement's own count did.

So the same query on the same memory takes the same branch as before, and results are
unchanged (tests: ``tests/integration/test_size_gate.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

TABLES = ("mem_facts", "mem_messages")
TTL_SECONDS = 60.0


class SizeGate:
    """Per agent and table, ``True`` (exact search) when the agent has at most
    ``exact_rows`` rows there, ``False`` (HNSW) otherwise; ``None`` when there is no
    exact branch (``exact_rows`` ≤ 0)."""

    def __init__(self, exact_rows: int, ttl: float = TTL_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.exact_rows = int(exact_rows)
        self.ttl = ttl
        self.clock = clock
        self._kept: dict[str, tuple[float, dict[str, bool]]] = {}
        self._lock = threading.Lock()

    def verdicts(self, conn: Any, agent_id: str) -> dict[str, bool | None]:
        if self.exact_rows <= 0:
            return dict.fromkeys(TABLES)
        now = self.clock()
        with self._lock:
            kept = self._kept.get(agent_id)
        if kept is not None and kept[0] > now:
            return dict(kept[1])
        counts = self._count(conn, agent_id)
        small = {table: counts[table] <= self.exact_rows for table in TABLES}
        if all(self._far(n) for n in counts.values()):
            with self._lock:
                if len(self._kept) > 10_000:  # many agents: forget the oldest verdicts
                    self._kept.clear()
                self._kept[agent_id] = (now + self.ttl, small)
        return dict(small)

    def _far(self, rows: int) -> bool:
        """Far enough from the threshold that ``ttl`` seconds cannot carry it across."""
        return rows * 2 <= self.exact_rows or rows > 2 * self.exact_rows

    def _count(self, conn: Any, agent_id: str) -> dict[str, int]:
        cap = 2 * self.exact_rows + 1  # enough to tell "far above" from "near"
        row = conn.execute(
            "SELECT (SELECT count(*) FROM (SELECT 1 FROM mem_facts WHERE agent_id = %(a)s"
            "        LIMIT %(cap)s) f),"
            "       (SELECT count(*) FROM (SELECT 1 FROM mem_messages WHERE agent_id = %(a)s"
            "        LIMIT %(cap)s) m)",
            {"a": agent_id, "cap": cap},
        ).fetchone()
        return {"mem_facts": int(row[0]), "mem_messages": int(row[1])}
