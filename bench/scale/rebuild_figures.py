"""Rebuild figures of the scale bench: events/s and the rebuild process's peak RSS at a size.

Each step runs in its own child process, so the peak RSS (``ru_maxrss`` from ``wait4``) is the
rebuild's alone — not the generator's (which holds whole agent aggregates) nor the bench's:
1. generate ``facts`` FactAdded events with ``bench.rebuild.run.generate`` (the rebuild bench's
   own data, so the figures compare with it);
2. a cold rebuild (every text embedded by the hash embedder: fills the embedding cache);
3. a warm rebuild (zero embedder calls: what replay itself costs).

The rebuild call is in ONE small function, ``REBUILD_CALL`` (the code the children run), so a
rewrite of ``projections.rebuild`` only has to keep ``rebuild(EventLog, env, embedder)``
returning a report with ``events``, ``seconds``, ``events_per_sec`` and ``index_seconds``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[2]
IDLE_TIMEOUT_SEC = 600

GENERATE = """
import json, sys
from bench.rebuild.run import generate
from engramdb.services.memory.event_log import EventLog
env, facts, agents = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
app = EventLog({**env, "IS_SNAPSHOTTING_ENABLED": "n"})
print(generate(app, facts, agents, 1000))
app.close()
"""

REBUILD_CALL = """
import json, sys
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.projections.embeddings import CountingEmbedder
from engramdb.projections.rebuild import rebuild
from engramdb.services.memory.event_log import EventLog
env = json.loads(sys.argv[1])
r = rebuild(EventLog, env, CountingEmbedder(HashEmbedder()))
print(json.dumps({"events": r.events, "seconds": r.seconds, "events_per_sec": r.events_per_sec,
                  "index_seconds": r.index_seconds}))
"""


@dataclass(frozen=True)
class RebuildFigures:
    facts: int
    events: int
    generate_seconds: float
    cold_events_per_sec: float
    warm_events_per_sec: float
    warm_seconds: float
    warm_index_seconds: float
    cold_peak_rss_mb: float
    warm_peak_rss_mb: float


def _child(code: str, *args: str) -> tuple[str, float]:
    """Run ``code`` in a child interpreter; its stdout's last line and its peak RSS (MB)."""
    proc = subprocess.Popen([sys.executable, "-c", code, *args], cwd=ROOT, stdout=subprocess.PIPE,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"rebuild bench child failed ({proc.returncode}): {out[-2000:]}")
    return out.strip().splitlines()[-1], usage.ru_maxrss / 1024  # KiB on Linux


def rebuild_figures(pg_url: str, facts: int) -> RebuildFigures:
    """Generate ``facts`` events in a fresh schema, rebuild cold then warm; drop the schema."""
    from engramdb.infra.database import es_env_from_url

    schema = f"scale_rb_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    # eventsourcing ends a session idle in a transaction for 5 s; the rebuild on main folds rows
    # in Python inside its write transaction, which on a box at load 20 took longer (the run
    # aborted at 100k). Longer here so a loaded box measures instead of aborting (reported).
    env = json.dumps({**es_env_from_url(pg_url, schema),
                      "POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT": str(IDLE_TIMEOUT_SEC)})
    try:
        started = time.monotonic()
        _child(GENERATE, env, str(facts), str(max(20, facts // 5000)))
        generated = time.monotonic() - started
        cold_line, cold_rss = _child(REBUILD_CALL, env)
        warm_line, warm_rss = _child(REBUILD_CALL, env)
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    cold, warm = json.loads(cold_line), json.loads(warm_line)
    return RebuildFigures(facts, int(warm["events"]), generated, float(cold["events_per_sec"]),
                          float(warm["events_per_sec"]), float(warm["seconds"]),
                          float(warm["index_seconds"]), cold_rss, warm_rss)
