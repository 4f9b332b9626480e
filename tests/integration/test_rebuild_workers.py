"""Fold workers (ADR-0039): a rebuild whose groups are read, folded and formatted in worker
processes gives the in-process rebuild's tables row for row — with a warm cache, and with a
cold one (another embedding model: the workers ask the rebuilding process to embed the texts
the cache lacks, then format again)."""

from __future__ import annotations

from typing import Any

import psycopg

from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.projections.embeddings import CountingEmbedder
from engramdb.projections.rebuild import rebuild
from engramdb.projections.runner import ProjectionSet
from engramdb.services.memory.event_log import EventLog
from tests.integration.test_rebuild import drive, dump, store  # noqa: F401 - the fixture


def test_worker_fold_equals_in_process(pg_url: str, store: Any) -> None:  # noqa: F811
    schema, env, app = store
    embedder = CountingEmbedder(HashEmbedder())
    with ProjectionSet.start(EventLog, env, embedder) as ps:
        pos = drive(app, "agent-a", 9)
        pos = drive(app, "agent-b", 6)
        pos = drive(app, "agent-c", 4)
        ps.wait(pos, timeout=30)
    incremental = dump(pg_url, schema)

    # groups of one key byte each (three agents: three groups), pages of 7
    counting = CountingEmbedder(HashEmbedder())
    report = rebuild(EventLog, env, counting, group_events=1, page_size=7,
                     fold_workers=2)
    assert counting.calls == 0 and report.events >= pos - 1
    assert dump(pg_url, schema) == incremental
    rebuild(EventLog, env, counting, group_events=1, fold_workers=0)
    assert dump(pg_url, schema) == incremental

    # a model the cache has never seen: every vector is missing in the workers' lookups
    in_process = CountingEmbedder(HashEmbedder(dimensions=32))
    rebuild(EventLog, env, in_process, group_events=1, fold_workers=0)
    small = dump(pg_url, schema)
    assert in_process.texts > 0
    with psycopg.connect(pg_url, autocommit=True) as conn:  # cold again
        conn.execute(f'DELETE FROM "{schema}".mem_embedding_cache WHERE model_id = %s',
                     (in_process.model_id,))
    workers = CountingEmbedder(HashEmbedder(dimensions=32))
    rebuild(EventLog, env, workers, group_events=1, fold_workers=2)
    assert workers.texts == in_process.texts and workers.calls > 0
    assert dump(pg_url, schema) == small
