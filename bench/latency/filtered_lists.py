"""Filtered vs unfiltered fact lists at 100k facts (issue 24, ADR-0047), in one run:

    python -m bench.latency.filtered_lists [--size 100000] [--sessions 100] [--calls 30] [--runs 3]
                                           [--fillers 20] [--database-url URL] [--schema NAME]
                                           [--compare PACKAGE]

The data of ``bench.latency.filtered`` (the same ``--schema`` can be reused). Each contender
lists the first page of 50 of the agent's active facts (``list_facts``, what Mem0's
``get_all`` and every list surface call) under its filter; ``--calls`` calls per run, the
order of contenders rotating between runs. Contenders: ``bench.latency.filtered``'s (one
session, half of the turns, 2 % clustered, 2 % spread, session AND metadata), plus a value no
turn has (the whole agent must be ruled out), an ``in`` and an ``OR`` (ORed containments of
the copy, ``MetadataFilter.branches``) and an ``ne`` (not containments: the source-turn test). Printed: each contender's median over runs of its p50 (ms) and of its
p50 ratio to the unfiltered page in the same run. ``--compare oldengramdb``: the same through
an earlier commit exported under another name (``bench.latency.identity``), interleaved.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from psycopg_pool import ConnectionPool

from bench.latency.filtered import add_data_arguments, bench_data
from bench.latency.report import percentile
from bench.latency.retrieve import load_text

PAGE = 50
# label -> (session, metadata filter tree)
CONTENDERS: dict[str, tuple[str | None, dict[str, Any] | None]] = {
    "unfiltered": (None, None),
    "session": ("s37", None),
    "metadata-broad": (None, {"channel": "slack"}),
    "metadata-rare": (None, {"tier": "gold"}),
    "metadata-rare-spread": (None, {"region": "eu"}),
    "session+metadata": ("s37", {"channel": "slack"}),
    "metadata-no-match": (None, {"region": "nowhere"}),
    "metadata-in": (None, {"region": {"in": ["eu", "apac"]}}),
    "metadata-or": (None, {"OR": [{"tier": "gold"}, {"region": "eu"}]}),
    "metadata-ne (not containments)": (None, {"channel": {"ne": "email"}}),
}

Lister = Callable[[str | None, dict[str, Any] | None], int]


def lister(package: str, pool: ConnectionPool, agent: str) -> Lister:
    """``list_facts`` of ``package`` (``engramdb`` or an exported earlier commit) as a call."""
    queries = importlib.import_module(f"{package}.services.management.queries")
    models = importlib.import_module(f"{package}.services.management.models")
    filters = importlib.import_module(f"{package}.services.management.metadata_filter")

    def call(session: str | None, metadata: dict[str, Any] | None) -> int:
        flt = None if metadata is None else filters.MetadataFilter(metadata)
        page = queries.list_facts(pool, agent, models.FactFilter(limit=PAGE, session=session), flt)
        return len(page.items)

    return call


def measure(listers: dict[str, Lister], calls: int, runs: int) -> dict[str, dict[str, Any]]:
    named = {f"{label}{'' if who == 'engramdb' else ' (other)'}": (who, *spec)
             for who in listers for label, spec in CONTENDERS.items()}
    for who, session, metadata in named.values():  # warm-up, and past psycopg's prepare threshold
        for _ in range(6):
            listers[who](session, metadata)
    p50s: dict[str, list[float]] = {k: [] for k in named}
    ratios: dict[str, list[float]] = {k: [] for k in named}
    rows: dict[str, int] = {}
    labels = list(named)
    for r in range(runs):
        this: dict[str, float] = {}
        for label in labels[r % len(labels):] + labels[: r % len(labels)]:
            who, session, metadata = named[label]
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                rows[label] = listers[who](session, metadata)
                times.append((time.perf_counter() - start) * 1000.0)
            this[label] = percentile(times, 50)
            p50s[label].append(this[label])
        for label in labels:
            base = "unfiltered (other)" if label.endswith(" (other)") else "unfiltered"
            ratios[label].append(this[label] / this[base])
    return {label: {"p50": statistics.median(p50s[label]), "ratio": statistics.median(ratios[label]),
                    "rows": rows[label], "p50_runs": p50s[label]} for label in labels}


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    add_data_arguments(ap)
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--compare", help="an earlier commit exported as another package, measured alongside")
    args = ap.parse_args(argv)
    with bench_data(args, "bench_fls") as data:
        pool = ConnectionPool(data.url, min_size=1, max_size=2,
                              kwargs={"options": f"-c search_path={data.schema},public"})
        pool.wait()
        listers = {"engramdb": lister("engramdb", pool, data.agent)}
        if args.compare:
            listers[args.compare] = lister(args.compare, pool, data.agent)
        before = load_text()
        got = measure(listers, args.calls, args.runs)
        print(f"\nfiltered vs unfiltered list_facts (a page of {PAGE}), {args.size} facts "
              f"({args.sessions} sessions, +{args.fillers} agents of 1k), {args.runs} runs x {args.calls} calls")
        print(f"{'contender':<44} {'p50 ms':>8} {'x unfiltered':>13} {'rows':>5}  p50 per run")
        for label, s in got.items():
            runs_txt = " ".join(f"{v:.1f}" for v in s["p50_runs"])
            print(f"{label:<44} {s['p50']:8.1f} {s['ratio']:13.2f} {s['rows']:5d}  {runs_txt}")
        print(f"{before} before, {load_text()} after")
        pool.close()

if __name__ == "__main__":
    main()
