"""Inspector render bench (issue 23): ``python -m bench.ui.render [--sizes 1000,100000] [--runs 30]``.

Server-side time of every inspector page for an agent of each size — the FastAPI app over
httpx's in-process ASGI transport on a real ``Memory`` (throwaway embedded PostgreSQL), so a
figure is routing + facade + SQL + Jinja, no network and no browser. Agents are bulk-loaded
into the read models (``tests/support/ui_seed.py``: facts with supersession chains, entities,
relationships, turns) and VACUUM ANALYZEd, as a steady-state database is. Prints p50/p95 per
page and size, and each page's weight (HTML bytes; the CSS and JS are fetched once).
Target (ADR-0044): p95 ≤ 300 ms per page at 100k facts on the 2-core box.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.shared.throwaway_db import database_url  # noqa: E402
from engramdb.infra.providers.scripted import HashEmbedder  # noqa: E402
from engramdb.services.entrypoints.http.api import create_app  # noqa: E402
from engramdb.services.memory.facade import Memory  # noqa: E402
from tests.support.ui_seed import seed_agent  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "1")


def pages(agent: str, n: int) -> dict[str, str]:
    mid = "2026-01-01T00:00:00+00:00".replace("00:00:00", "12:00:00")
    a = f"/ui/agents/{agent}"
    return {
        "agents (all)": "/ui/agents",
        "agents (search)": f"/ui/agents?q={agent}",
        "facts": a,
        "facts?text": f"{a}?text=violin",
        "facts?entity": f"{a}?entity=person:p1",
        "facts?status=all": f"{a}?status=all",
        "entities+graph": f"{a}/entities",
        "graph?center": f"{a}/entities?center=person:p1",
        "conversation": f"{a}/conversation",
        "conversation?session": f"{a}/conversation?session=s1",
        "patterns": f"{a}/patterns",
        "lineage": f"{a}/facts/f{min(n - 1, 9)}",
        "time (as of)": f"{a}/time?at={mid}",
        "time+diff": f"{a}/time?at={mid}&t1={mid}&t2=2026-12-31T00:00:00%2B00:00",
        "retrieve (page, no query)": f"{a}/retrieve",
        "ops": "/ui/ops",
    }


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


async def measure(app: object, paths: dict[str, str], runs: int) -> dict[str, tuple[float, float, int]]:
    out: dict[str, tuple[float, float, int]] = {}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),  # type: ignore[arg-type]
                                 base_url="http://127.0.0.1") as client:
        for name, path in paths.items():
            times: list[float] = []
            size = 0
            for i in range(runs + 2):
                start = time.perf_counter()
                r = await client.get(path)
                took = (time.perf_counter() - start) * 1000
                if r.status_code != 200:
                    raise SystemExit(f"{path}: {r.status_code} {r.text[:300]}")
                size = len(r.content)
                if i >= 2:  # two warm-ups: plan caches, template compilation
                    times.append(took)
            out[name] = (statistics.median(times), pct(times, 0.95), size)
        static = 0
        for name in ("ui.css", "ui.js"):
            static += len((await client.get(f"/ui/static/{name}")).content)
        out["(static css+js, once)"] = (0.0, 0.0, static)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--extra-big", type=int, default=4,
                        help="more agents of the largest size, so the agent list pages over "
                        "several big agents (their counts are capped at 10,000)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    with database_url(args.database_url) as url, Memory.open(
        database_url=url, embedder=HashEmbedder(384), llm=None, quiet=True
    ) as memory:
        start = time.perf_counter()
        with psycopg.connect(url, autocommit=True) as conn:
            for n in sizes:
                with conn.transaction():
                    seed_agent(conn, f"bench-{n}", n)
            for i in range(args.extra_big):
                with conn.transaction():
                    seed_agent(conn, f"bench-{max(sizes)}-more-{i}", max(sizes))
            conn.execute("VACUUM ANALYZE")
        total = sum(sizes) + args.extra_big * max(sizes)
        print(f"seeded {total} facts in {time.perf_counter() - start:.1f}s; load "
              f"{os.getloadavg()[0]:.2f}", flush=True)
        app = create_app(memory)
        results = {n: asyncio.run(measure(app, pages(f"bench-{n}", n), args.runs)) for n in sizes}
    header = "| page | " + " | ".join(f"{n:,} facts p50 / p95 ms" for n in sizes) + " | HTML bytes |"
    print(header)
    print("|" + "---|" * (len(sizes) + 2))
    for name in results[sizes[0]]:
        cells = [f"{results[n][name][0]:.1f} / {results[n][name][1]:.1f}" for n in sizes]
        print(f"| {name} | " + " | ".join(cells) + f" | {results[sizes[-1]][name][2]:,} |")
    worst = max(results[sizes[-1]][k][1] for k in results[sizes[-1]])
    print(f"worst p95 at {sizes[-1]:,} facts: {worst:.1f} ms (target ≤ 300 ms)")


if __name__ == "__main__":
    main()
