"""Read+decode+fold of a schema's whole log, in one process, alternated: the mapper path the
rebuild used before ADR-0032 (``select_notifications`` pages, ``mapper.to_domain_event``) vs
``LogStream`` + ``BulkDecoder``. Same folds, nothing written.

    python -m bench.rebuild.read SCHEMA [--runs 3]

``SCHEMA``: a schema holding a log (e.g. one ``bench.rebuild.run`` generated and kept), on
``ENGRAMDB_DATABASE_URL`` or the embedded server.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from engramdb.infra.database import es_env_from_url, resolve_database
from engramdb.infra.settings import Settings
from engramdb.projections.log_stream import LogStream
from engramdb.projections.positions import _conninfo
from engramdb.projections.read_models import select
from engramdb.services.memory.event_log import EventLog


def old(app: Any, stop: int) -> int:
    folds = [rm.fold() for rm in select(None)]
    to_event = app.mapper.to_domain_event
    last = n = 0
    while last < stop:
        page = app.recorder.select_notifications(start=last, limit=5000, stop=stop,
                                                 inclusive_of_start=False)
        if not page:
            break
        for nt in page:
            e = to_event(nt)
            for f in folds:
                f.apply(e)
        n += len(page)
        last = page[-1].id
    return n

def new(app: Any, stop: int, env: dict[str, str]) -> int:
    folds = [rm.fold() for rm in select(None)]
    n = 0
    for p in LogStream(app, _conninfo(env), stop).group_pages(None):
        for e in p:
            for f in folds:
                f.apply(e)
        n += len(p)
    return n

def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("schema")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    name = args.schema
    db = resolve_database(Settings())
    env = es_env_from_url(db.url, name)
    res: dict[str, list[float]] = {"old": [], "new": []}
    for _ in range(args.runs):
        for k in ("old", "new"):
            app = EventLog(env)
            stop = app.recorder.max_notification_id() or 0
            t = time.perf_counter()
            n = old(app, stop) if k == "old" else new(app, stop, env)
            res[k].append(n / (time.perf_counter() - t))
            app.close()
            print(k, f"{res[k][-1]:.0f} ev/s", flush=True)
    o, w = statistics.median(res["old"]), statistics.median(res["new"])
    print(f"median read+decode+fold: mapper path {o:,.0f} ev/s, bulk path {w:,.0f} ev/s, "
          f"ratio {w / o:.2f}x")

if __name__ == "__main__":
    main()
