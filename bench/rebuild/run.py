"""Rebuild throughput and memory: the shadow-table rebuild vs the previous in-place one.

Generates ``--facts`` FactAdded events (``--batch`` facts per save, spread over ``--agents``
agents, plus one message record per save), fills the embedding cache once (hash test
embedder, 384-d), then ``--runs`` times, alternating, rebuilds with the current path
(``projections.rebuild``: streamed fold, binary COPY into shadow tables, indexes after the
load, atomic swap) and with the previous one (``bench.rebuild.legacy``: in place, text COPY +
SQL join, readers blocked), each in a fresh child process so its peak RSS is its own. Warm
cache: zero embedder calls (asserted). After the runs, a bare ``CREATE INDEX … USING hnsw`` on
a copy of the same ``mem_facts`` rows, same settings, right after each run of the current path,
is the yardstick of its HNSW phase.

    python -m bench.rebuild.run [--facts 100000] [--runs 3] [--no-legacy] [--cold] [--baseline DIR]

``--baseline DIR``: also rebuild, alternated with the others, with the code exported in
``DIR`` (e.g. ``git archive <ref> | tar -x -C DIR``; its child process imports ``engramdb``
from there, ``bench.rebuild.exported``): before/after figures of a change in one invocation.

Prints medians: events/s of read+fold, load (COPY) and fold+load, HNSW and other index
seconds, swap seconds, peak RSS. ``measure()`` returns the same as a dict (``bench.scale.run``).
Database: ``ENGRAMDB_DATABASE_URL`` if set, else the embedded server; a fresh schema is
created and dropped.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from bench.rebuild import exported
from bench.write.aggregate_cost import BY, bench_schema
from engramdb.domain.aggregate import MessageRecord
from engramdb.domain.payloads import FactPayload
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.projections.embeddings import CountingEmbedder
from engramdb.projections.shadow import MAINTENANCE_WORK_MEM, PARALLEL_WORKERS
from engramdb.projections.tables import HNSW
from engramdb.services.memory.event_log import EventLog

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def generate(app: EventLog, facts: int, agents: int, batch: int) -> int:
    per_agent = facts // agents
    k = 0
    for a in range(agents):
        agent = f"bench-{a}"
        mem = app.agent_memory(agent)
        mem.register_entity("person:user", "User", "person", None, BY)
        for start in range(0, per_agent, batch):
            msg = f"{agent}-m{start}"
            rec = MessageRecord(
                agent_id=agent,
                message_id=msg,
                session_id=None,
                speaker="user",
                text=f"message {msg}",
                occurred_at=T0,
                metadata={},
            )
            for i in range(start, min(per_agent, start + batch)):
                k += 1
                mem.add_fact(
                    FactPayload(
                        fact_id=f"f{i}",
                        entity_key="person:user",
                        linked_entities=[],
                        attribute_key=None,
                        text=f"fact {k} of agent {a}: likes item {i}",
                        category="general",
                        confidence=0.8,
                        importance=0.5,
                        source_message_id=msg,
                        source_message_ids=[msg],
                        speaker="user",
                        valid_from=T0 + timedelta(seconds=i),
                        decided_by=BY,
                    )
                )
            app.save(mem, rec)
    return k


def _child(impl: str, env: dict[str, str], out: Any, fold_workers: int | None = None) -> None:
    """One rebuild in a fresh process; sends its report, its own peak RSS and its fold
    workers' (MiB), and the CPU seconds of the process and its workers."""
    counting = CountingEmbedder(HashEmbedder())
    if impl == "legacy":
        from bench.rebuild.legacy import rebuild_legacy

        # the old path holds one transaction open while Python builds every row list; under
        # load that exceeded eventsourcing's 5 s idle-in-transaction timeout and failed
        report = rebuild_legacy(EventLog,
                                {**env, "POSTGRES_IDLE_IN_TRANSACTION_SESSION_TIMEOUT": "0"},
                                counting)
        load = report.write_seconds - report.index_seconds
        # its readers block on the dropped tables from the drop to the commit: the whole write
        report.blocked_seconds = report.write_seconds
    else:
        from engramdb.projections.rebuild import rebuild

        report = rebuild(EventLog, env, counting, fold_workers=fold_workers)
        load = report.load_seconds
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    out.send({**report.model_dump(), "load": load, "peak_rss_mb": me.ru_maxrss / 1024,
              "workers_peak_rss_mb": kids.ru_maxrss / 1024,
              "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
              "embedder_calls": counting.calls})


def run_in_child(impl: str, env: dict[str, str], code: str | None = None,
                 fold_workers: int | None = None) -> dict[str, Any]:
    """``code``: a directory of exported sources the child imports ``engramdb`` from."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    if code is None:
        proc = ctx.Process(target=_child, args=(impl, env, child, fold_workers))
    else:
        proc = ctx.Process(target=exported.run,
                           args=(code, "bench.rebuild.run", "_child", impl, env, child))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc.start()
    child.close()
    try:
        result: dict[str, Any] = parent.recv()
    except EOFError:
        raise RuntimeError(f"{impl} rebuild failed (see its traceback above)") from None
    proc.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the child's CPU and its fold workers' (reaped by it), measured the same way for the
    # exported baseline: Python's side of the rebuild, start-up included (not PostgreSQL's)
    result["cpu_s"] = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return result


def bare_hnsw_seconds(url: str, schema: str) -> float:
    """A bare ``CREATE INDEX … USING hnsw`` on a copy of ``mem_facts``' vectors, with the
    rebuild's settings: the yardstick of the rebuild's HNSW phase."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(schema)))
        conn.execute("DROP TABLE IF EXISTS bench_bare_hnsw")
        conn.execute("CREATE TABLE bench_bare_hnsw AS SELECT * FROM mem_facts")
        conn.execute("VACUUM ANALYZE bench_bare_hnsw")
        conn.execute(f"SET maintenance_work_mem = '{MAINTENANCE_WORK_MEM}'")  # type: ignore[arg-type]
        conn.execute(f"SET max_parallel_maintenance_workers = {PARALLEL_WORKERS}")  # type: ignore[arg-type]
        started = time.perf_counter()
        conn.execute(f"CREATE INDEX bench_bare_hnsw_idx ON bench_bare_hnsw {HNSW}")  # type: ignore[arg-type]
        seconds = time.perf_counter() - started
        conn.execute("DROP TABLE bench_bare_hnsw")
    return seconds


def _fold_load_seconds(r: dict[str, Any]) -> float:
    """Wall time of read+fold+load: reported since ADR-0036 (the fold of a group overlaps the
    load of the previous one); before, read + load (one after the other)."""
    return float(r.get("fold_load_seconds") or r["read_seconds"] + r["load"])


def _summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    def med(key: Any) -> float:
        return statistics.median(key(r) for r in runs)

    return {
        "events": runs[0]["events"],
        "read_fold_ev_s": med(lambda r: r["events"] / r["read_seconds"]),
        "load_ev_s": med(lambda r: r["events"] / r["load"]),
        "fold_load_ev_s": med(lambda r: r["events"] / _fold_load_seconds(r)),
        "total_ev_s": med(lambda r: r["events_per_sec"]),
        "seconds": med(lambda r: r["seconds"]),
        "hnsw_s": med(lambda r: r["index_seconds"]),
        "key_index_s": med(lambda r: r.get("key_index_seconds", 0.0)),
        "swap_s": med(lambda r: r.get("swap_seconds", 0.0)),
        "blocked_s": med(lambda r: r.get("blocked_seconds", 0.0)),
        "peak_rss_mb": med(lambda r: r["peak_rss_mb"]),
        "workers_peak_rss_mb": med(lambda r: r.get("workers_peak_rss_mb", 0.0)),
        "cpu_us_per_event": med(lambda r: r.get("cpu_s", 0.0) / r["events"] * 1e6),
    }


def measure(facts: int = 100_000, runs: int = 3, agents: int = 20, batch: int = 1000,
            legacy: bool = True, cold: bool = False, log: Any = print,
            baseline: str | None = None,
            fold_workers: list[int] | None = None) -> dict[str, Any]:
    """Generate, rebuild ``runs`` times per path in child processes; medians per path."""
    out: dict[str, Any] = {"facts": facts, "runs": runs}
    with bench_schema("bench_rb") as (url, env):
        schema = env["POSTGRES_SCHEMA"]
        app = EventLog({**env, "IS_SNAPSHOTTING_ENABLED": "n"})
        t = time.perf_counter()
        n = generate(app, facts, agents, batch)
        app.close()
        log(f"generated {n} facts in {time.perf_counter() - t:.1f}s")
        first = run_in_child("new", env)  # fills the embedding cache (cold)
        log(line("cold cache (new path)", first))
        if cold:
            out["cold"] = first
        workers = fold_workers or [None]  # type: ignore[list-item]
        variants = {"new": workers[0], **{f"new-w{w}": w for w in workers[1:]}}
        results: dict[str, list[dict[str, Any]]] = {
            **{v: [] for v in variants}, "baseline": [], "legacy": []}
        impls = [*variants, *(["baseline"] if baseline else []), *(["legacy"] if legacy else [])]
        for _ in range(runs):
            for impl in impls:
                if impl == "baseline":
                    r = run_in_child("new", env, baseline)
                elif impl in variants:
                    r = run_in_child("new", env, fold_workers=variants[impl])
                else:
                    r = run_in_child(impl, env)
                assert r["embedder_calls"] == 0, r
                if impl == "new":  # the yardstick right after, on the rows just built
                    r["bare_hnsw_s"] = bare_hnsw_seconds(url, schema)
                results[impl].append(r)
                log(line(f"warm {impl}", r))
        out["bare_hnsw_s"] = statistics.median(r["bare_hnsw_s"] for r in results["new"])
        out["hnsw_ratio"] = statistics.median(
            r["index_seconds"] / r["bare_hnsw_s"] for r in results["new"])
        for impl, rs in results.items():
            if rs:
                out[impl] = _summary(rs)
    return out


def line(label: str, r: dict[str, Any]) -> str:
    return (
        f"{label}: {r['events']} events in {r['seconds']:.1f}s = {r['events_per_sec']:,.0f} ev/s "
        f"(read+fold {r['read_seconds']:.1f}s, embed {r['embed_seconds']:.1f}s "
        f"[{r['texts_embedded']} texts], load {r['load']:.1f}s, fold+load wall "
        f"{_fold_load_seconds(r):.1f}s = {r['events'] / _fold_load_seconds(r):,.0f} ev/s, keys/indexes "
        f"{r.get('key_index_seconds', 0):.1f}s, HNSW {r['index_seconds']:.1f}s, swap "
        f"{r.get('swap_seconds', 0):.2f}s (readers blocked {r.get('blocked_seconds', 0):.3f}s)"
        + (f", bare HNSW {r['bare_hnsw_s']:.1f}s" if "bare_hnsw_s" in r else "") + f"; peak RSS {r['peak_rss_mb']:.0f} MiB, "
        f"workers {r.get('workers_peak_rss_mb', 0):.0f} MiB; Python CPU {r.get('cpu_s', 0):.1f}s)"
    )


def report(m: dict[str, Any]) -> str:
    rows = [f"rebuild of {m['new']['events']:,} events ({m['facts']:,} facts), warm cache, "
            f"medians of {m['runs']} (each run in a fresh process):"]
    header = ("path", "read+fold ev/s", "load ev/s", "fold+load ev/s", "total ev/s",
              "keys+idx s", "HNSW s", "swap s", "readers blocked s", "peak RSS MiB")
    rows.append("  " + " | ".join(header))
    for impl in [k for k in m if k.startswith("new")] + ["baseline", "legacy"]:
        s = m.get(impl)
        if s and isinstance(s, dict) and "fold_load_ev_s" in s:
            rows.append(
                f"  {impl} | {s['read_fold_ev_s']:,.0f} | {s['load_ev_s']:,.0f} | "
                f"{s['fold_load_ev_s']:,.0f} | {s['total_ev_s']:,.0f} | {s['key_index_s']:.1f} | "
                f"{s['hnsw_s']:.1f} | {s['swap_s']:.2f} | {s['blocked_s']:.3f} | "
                f"{s['peak_rss_mb']:.0f} (workers {s['workers_peak_rss_mb']:.0f}); "
                f"rebuild process + workers CPU {s['cpu_us_per_event']:.0f} us/event")
    new, old, base = m["new"], m.get("legacy"), m.get("baseline")
    for impl in [k for k in m if k.startswith("new")]:
        v = m[impl]
        if not base:
            break
        rows.append(f"  {impl}: fold+load speed-up vs the baseline: "
                    f"{v['fold_load_ev_s'] / base['fold_load_ev_s']:.2f}x; read+fold "
                    f"{v['read_fold_ev_s'] / base['read_fold_ev_s']:.2f}x; load "
                    f"{v['load_ev_s'] / base['load_ev_s']:.2f}x; total "
                    f"{v['total_ev_s'] / base['total_ev_s']:.2f}x; Python CPU per event "
                    f"{v['cpu_us_per_event'] / base['cpu_us_per_event']:.2f}x")
    rows.append(f"  HNSW in the rebuild {new['hnsw_s']:.1f}s vs bare CREATE INDEX "
                f"{m['bare_hnsw_s']:.1f}s on a copy of the same rows, right after each run: "
                f"median ratio {m['hnsw_ratio']:.2f}x")
    if old:
        rows.append(f"  fold+load speed-up vs the previous path: "
                    f"{new['fold_load_ev_s'] / old['fold_load_ev_s']:.2f}x; total "
                    f"{new['total_ev_s'] / old['total_ev_s']:.2f}x")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--facts", type=int, default=100_000)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-legacy", action="store_true", help="skip the previous path")
    parser.add_argument("--cold", action="store_true", help="keep the cold-cache report")
    parser.add_argument("--baseline", help="directory of exported sources to compare with")
    parser.add_argument("--fold-workers", type=int, nargs="+",
                        help="fold worker counts (ADR-0039): the first is 'new', the others "
                        "'new-w<n>', alternated; default: the rebuild's own default")
    args = parser.parse_args()
    m = measure(args.facts, args.runs, args.agents, args.batch, legacy=not args.no_legacy,
                cold=args.cold, baseline=args.baseline, fold_workers=args.fold_workers)
    print(report(m))


if __name__ == "__main__":
    main()
