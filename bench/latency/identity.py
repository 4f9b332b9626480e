"""Do two Retriever implementations give the same results? Byte for byte, on one memory.

    PYTHONPATH=<dir holding the other package> python -m bench.latency.identity \
        --other oldengramdb.services.retrieve [--sizes 1000,10000] [--queries 150] \
        [--ignore directives]

For a refactoring that must not change behaviour (ADR-0041's serial tail, ADR-0043's house
layout): the latency bench's synthetic memory is loaded once, then every query goes through
both ``Retriever`` classes on the same pool, and each result is dumped as JSON without what
legitimately differs between two calls (durations, per-stage timings). Exits 1 on the first
difference, printing both dumps. ``--ignore`` leaves out keys the newer code added to the
result since the other was exported (``directives``, issue 26: an old ``Retriever`` has no
such field), so a later field does not hide whether everything else is still identical. The
other package is usually the previous commit exported under another name: ``git archive
<commit>``, its layers copied into ``oldengramdb/`` and ``engramdb.`` imports renamed
(ADR-0043 says how it was done for the house layout).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import uuid
from collections.abc import Sequence
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from psycopg_pool import ConnectionPool  # noqa: E402

from bench.latency.data import DIM, load_schema, unit  # noqa: E402
from bench.latency.retrieve import InLoopEmbedder, queries_for  # noqa: E402
from bench.shared.throwaway_db import database_url  # noqa: E402
from engramdb.services.retrieve import Retriever  # noqa: E402

VOLATILE = frozenset({"duration_ms", "timings_ms", "stage_ms", "elapsed_ms"})


def stable(value: Any, drop: frozenset[str] = VOLATILE) -> Any:
    """``value`` without the keys in ``drop`` (by default those that measure time: they
    differ between any two calls)."""
    if isinstance(value, dict):
        return {k: stable(v, drop) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [stable(v, drop) for v in value]
    return value


def dump(result: Any, drop: frozenset[str] = VOLATILE) -> str:
    return json.dumps(stable(result.model_dump(mode="json"), drop), sort_keys=True)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--other", required=True, help="importable package with the other Retriever")
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--queries", type=int, default=150, help="per size")
    ap.add_argument("--fillers", type=int, default=5)
    ap.add_argument("--database-url", default=os.environ.get("ENGRAMDB_BENCH_DATABASE_URL"))
    ap.add_argument("--ignore", default="", metavar="KEY[,KEY]",
                    help="result keys added since the other code, left out of both dumps")
    args = ap.parse_args(argv)
    drop = VOLATILE | {k for k in args.ignore.split(",") if k}
    sizes = [int(s) for s in args.sizes.split(",")]
    rng = np.random.default_rng(7)
    vocab = [f"w{i:04d}x" for i in range(2000)]
    centroids = unit(rng.normal(size=(400, DIM)).astype(np.float32))
    schema = f"bench_id_{uuid.uuid4().hex[:8]}"
    with database_url(args.database_url) as url:
        names = load_schema(url, schema, sizes, args.fillers, rng, centroids, vocab)
        pool = ConnectionPool(url, min_size=2, max_size=4,
                              kwargs={"options": f"-c search_path={schema},public"})
        pool.wait()
        embedder = InLoopEmbedder()
        ours = Retriever(pool, embedder)
        theirs = importlib.import_module(args.other).Retriever(pool, embedder)
        compared = facts = turns = 0
        for size in sizes:
            agent = f"bench-{size}"
            for query in queries_for(size, args.queries, names[agent], vocab, centroids, embedder):
                mine = ours.retrieve(agent, query)
                facts, turns = facts + len(mine.facts), turns + len(mine.events)
                a, b = dump(mine, drop), dump(theirs.retrieve(agent, query), drop)
                if a != b:
                    print(f"DIFFERENT at {agent} {query!r}\nthis: {a}\nother: {b}")
                    raise SystemExit(1)
                compared += 1
        ours.close()
        theirs.close()
        pool.close()
    print(f"{compared} retrieves byte-identical between engramdb and {args.other} "
          f"(sizes {args.sizes}, {args.queries} queries each; {facts} facts and {turns} turns "
          "with every score, the context, plan and trace"
          + (f"; ignored: {args.ignore})" if args.ignore else ")"))


if __name__ == "__main__":
    main()
