"""Messages/s through NATS to visible facts with 1 and 3 ``engramdb serve`` processes.

A quick measurement for docs/scaling.md (not the full scale bench of issue 13, item 5): embedded
PostgreSQL + NATS in a throwaway dir, ``AGENTS`` agents × ``PER_AGENT`` messages published at
once, timed until every fact is in ``mem_facts``; offline extractor, ``hash-bow-384`` embedder.
Run from the checkout root: ``python -m bench.scale_serve_quick``.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

from engramdb.infra.database import ensure_extensions
from engramdb.infra.embedded_nats import ensure_nats
from engramdb.infra.embedded_postgres import ensure_postgres

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from scale_support import conversation, publish, serve_env, start_serve, stop, wait_for  # noqa: E402

AGENTS, PER_AGENT = 50, 6


def facts_visible(url: str, schema: str, expected: int) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            row = conn.execute(f'SELECT count(*) FROM "{schema}".mem_facts').fetchone()
        except psycopg.errors.UndefinedTable:
            return False
    return row is not None and int(row[0]) >= expected


def run_once(pg_url: str, nats_url: str, data: Path, processes: int) -> float:
    schema, prefix = f"m_{uuid.uuid4().hex[:8]}", f"m{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    env = serve_env(pg_url, nats_url, schema, prefix)
    logs = [data / f"{schema}-{i}.log" for i in range(processes)]
    procs = [start_serve(env, str(log))[0] for log in logs]
    try:
        wait_for(lambda: all(log.exists() and "ingest partition" in log.read_text() for log in logs), 90, "serves")
        time.sleep(3)  # the partitions spread over the processes
        messages = conversation([f"a{i}-{uuid.uuid4().hex[:4]}" for i in range(AGENTS)], PER_AGENT)
        started = time.monotonic()
        asyncio.run(publish(nats_url, prefix, messages))
        wait_for(lambda: facts_visible(pg_url, schema, len(messages)), 300, "facts")
        return len(messages) / (time.monotonic() - started)
    finally:
        stop(procs)


def main() -> None:
    data = Path(tempfile.mkdtemp(prefix="engramdb-scale-", dir="/tmp"))
    pg = ensure_postgres(data, fast_unsafe=True)
    ensure_extensions(pg.url)
    nats_handle = ensure_nats(data)
    try:
        for processes in (1, 3, 1, 3):
            rate = run_once(pg.url, nats_handle.url, data, processes)
            print(f"serve processes={processes}: {rate:.1f} messages/s to visible facts", flush=True)
    finally:
        nats_handle.stop()
        pg.stop()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
