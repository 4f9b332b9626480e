"""What erasure's disk rewrite costs (ADR-0051): ``VACUUM (FULL)`` of a message-like table
(primary key, text btree, tsvector GIN) after deleting one agent's rows, at 100k and 1M rows.

Why a synthetic table: the rewrite's cost depends on the table's size, not on what wrote it,
and generating a million rows in SQL takes seconds where ingesting them takes hours. The
figure to read is seconds per table size: the time the affected table is locked.

``OMP_NUM_THREADS=1 python -m bench.erasure.rewrite [--rows 100000,1000000] [--database-url URL]``
"""

from __future__ import annotations

import argparse
import time

import psycopg

from bench.shared.throwaway_db import database_url


def measure(url: str, rows: int) -> tuple[str, float]:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS bench_rewrite")
        c.execute("CREATE TABLE bench_rewrite (agent_id text, message_id text, text text, "
                  "tsv tsvector, PRIMARY KEY (agent_id, message_id))")
        c.execute("INSERT INTO bench_rewrite SELECT 'agent-' || (i %% 1000), 'm' || i, "
                  "'I live in city ' || md5(i::text) || ' and love ' || md5((i*7)::text) || "
                  "' tea every morning with my friends', NULL FROM generate_series(1, %s) i",
                  (rows,))
        c.execute("UPDATE bench_rewrite SET tsv = to_tsvector('simple', text)")
        c.execute("CREATE INDEX ON bench_rewrite USING gin (tsv)")
        c.execute("CREATE INDEX ON bench_rewrite (text)")
        c.execute("VACUUM ANALYZE bench_rewrite")
        row = c.execute("SELECT pg_size_pretty(pg_total_relation_size('bench_rewrite'))").fetchone()
        c.execute("DELETE FROM bench_rewrite WHERE agent_id = 'agent-7'")
        start = time.monotonic()
        c.execute("VACUUM (FULL) bench_rewrite")
        seconds = time.monotonic() - start
        c.execute("DROP TABLE bench_rewrite")
    return (row[0] if row else "?"), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100000,1000000")
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with database_url(args.database_url, "engramdb-bench-erasure-") as url:
        for rows in (int(r) for r in args.rows.split(",")):
            size, seconds = measure(url, rows)
            print(f"{rows} rows, {size}: VACUUM FULL {seconds:.2f} s", flush=True)


if __name__ == "__main__":
    main()
