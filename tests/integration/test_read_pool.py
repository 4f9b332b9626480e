"""One read-side pool, lent by its owner: pre-retrieval borrows it without closing it or
leaving its per-lookup ``statement_timeout`` on the shared connections."""

from __future__ import annotations

from typing import Any

from engramdb.infra.read_pool import open_read_pool
from engramdb.projections.schema import read_model_ddl
from engramdb.services.write.pre_retrieval import PreRetrieval


def test_pre_retrieval_borrows_the_read_pool(pg_url: str, fresh_schema: Any, agent_id: str) -> None:
    schema, _env = fresh_schema("pool")
    pool = open_read_pool(pg_url, schema, max_size=1)  # one connection: the same one is reused
    try:
        with pool.connection() as conn:
            for ddl in read_model_ddl(8):
                if "pg_trgm" not in ddl and "gin_trgm_ops" not in ddl:  # optional extension
                    conn.execute(ddl)
            conn.execute(
                "INSERT INTO mem_entities VALUES (%s,'person:carolina','Carolina','person','',NULL,now())",
                (agent_id,),
            )
        pre = PreRetrieval(pool, statement_timeout_ms=1234)
        found = pre.context(agent_id, "hello Carolina", "Ana")
        assert found is not None and [e.entity_key for e in found.entities] == ["person:carolina"]
        pre.close()  # a lent pool stays open
        with pool.connection() as conn:
            search_path = conn.execute("SHOW search_path").fetchone()
            timeout = conn.execute("SHOW statement_timeout").fetchone()
        assert search_path is not None and search_path[0].startswith(schema)
        assert timeout is not None and timeout[0] == "0"  # transaction-local, gone with it
    finally:
        pool.close()
