"""Issue 28 item 2: after ``erase_agent(A)`` no byte of A's text is left in any table file of
the database — heap, index, TOAST, free space — while B's is intact; A's rows are gone from
every table with an ``agent_id`` (``mem_job_runs`` included), and the dead version of A's
data-key row is gone too (it held the very key crypto-shredding destroyed).

The probe's method: grep the whole PostgreSQL data directory after a CHECKPOINT, WAL excluded
(README: the WAL is not reached). Real embedded PostgreSQL owned by this test (its files are
what is grepped), real projectors, the hashing embedder and the rule-based extractor.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import psycopg
import pytest

from engramdb.infra.data_keys import TABLE as KEY_TABLE
from engramdb.infra.database import es_env_from_url
from engramdb.infra.embedded_postgres import PostgresHandle, ensure_postgres
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.entrypoints.nats.changes import changes_stream_name, changes_subject
from engramdb.services.entrypoints.nats.ingest.partitions import messages_stream_config
from engramdb.services.entrypoints.nats.publisher import MessagePublisher
from engramdb.services.entrypoints.nats.webhooks import dead_stream_name
from engramdb.services.jobs.base import JobContext
from engramdb.services.jobs.runner import run_pass
from engramdb.services.memory.facade import Memory
from engramdb.services.write.messages import (
    ConversationMessage,
    DeadLetter,
    agent_token,
    deadletter_stream_name,
    deadletter_subject,
    message_subject,
    messages_stream_name,
)

A_WORDS = ["Zorblattique", "Quenwickshire", "Pellucidorama"]
B_WORD = "Glimmerfruitly"


@pytest.fixture
def own_pg() -> Iterator[PostgresHandle]:
    path = Path(tempfile.mkdtemp(prefix="engramdb-erase-disk-", dir="/tmp"))
    path.chmod(0o755)
    handle = ensure_postgres(path, stop_on_exit=False)
    try:
        yield handle
    finally:
        handle.stop()
        subprocess.run(["rm", "-rf", str(path)], check=False)


def _grep(pgdata: Path, words: list[str]) -> dict[str, list[str]]:
    """Files (outside pg_wal) holding each word, as bytes anywhere in the file."""
    found: dict[str, list[str]] = {w: [] for w in words}
    for file in pgdata.rglob("*"):
        if not file.is_file() or "pg_wal" in file.parts:
            continue
        data = file.read_bytes()
        for w in words:
            if w.encode() in data:
                found[w].append(str(file.relative_to(pgdata)))
    return found


def _checkpoint(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


def test_erase_leaves_no_byte_of_the_agent_in_any_table_file(own_pg: PostgresHandle) -> None:
    a, b = "disk-a", "disk-b"
    env = es_env_from_url(own_pg.url, "public")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as memory:
        for i, word in enumerate(A_WORDS):
            memory.write(a, f"I live in {word} and my friend {word} Smith loves tea.",
                         speaker="Ana", message_id=f"a{i}")
        memory.write(b, f"I live in {B_WORD} and love tea.", speaker="Bo", message_id="b1")
        memory.wait_for_projections()
        run_pass(JobContext(memory), agents=[a, b])  # rows in mem_job_runs for both
        _checkpoint(own_pg.url)
        before = _grep(own_pg.pgdata, [*A_WORDS, B_WORD])
        assert all(before.values()), before  # the scan sees every word in the table files

        start = time.monotonic()
        result = memory.erase_agent(a, actor="dpo")
        seconds = time.monotonic() - start
        assert "mem_messages" in result.tables_rewritten and KEY_TABLE in result.tables_rewritten
        _checkpoint(own_pg.url)

        after = _grep(own_pg.pgdata, [*A_WORDS, B_WORD])
        assert not any(after[w] for w in A_WORDS), {w: after[w] for w in A_WORDS}
        assert after[B_WORD], "the other agent's data must stay"
        with psycopg.connect(own_pg.url) as conn:
            tables = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.columns WHERE table_schema = 'public' "
                "AND column_name = 'agent_id'")]
            assert "mem_job_runs" in tables
            left = {t: conn.execute(f'SELECT count(*) FROM "{t}" WHERE agent_id = %s',  # noqa: S608
                                    (a,)).fetchone()[0] for t in tables}
            assert not any(left.values()), left
            b_runs = conn.execute("SELECT count(*) FROM mem_job_runs WHERE agent_id = %s",
                                  (b,)).fetchone()[0]
        assert b_runs > 0
        hit = memory.retrieve(b, f"where does Bo live {B_WORD}")
        assert any(B_WORD in f.fact_text for f in hit.facts)
        again = memory.erase_agent(a)  # idempotent: rewrites again, finds nothing
        assert again.already_erased
    print(f"erase to disk: {seconds:.2f} s, rewrote {len(result.tables_rewritten)} tables "
          f"({', '.join(result.tables_rewritten)})")


async def _stream_state(nats_url: str, prefix: str, a: str, b: str) -> dict[str, int]:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        out = {}
        for who, agent in (("a", a), ("b", b)):
            info = await js.stream_info(messages_stream_name(prefix),
                                        subjects_filter=f"{prefix}.messages.*.{agent_token(agent)}")
            out[who] = sum((info.state.subjects or {}).values())
        out["dead"] = (await js.stream_info(deadletter_stream_name(prefix))).state.messages
        for who, agent in (("changes_a", a), ("changes_b", b)):
            info = await js.stream_info(changes_stream_name(prefix),
                                        subjects_filter=changes_subject(agent, prefix))
            out[who] = sum((info.state.subjects or {}).values())
        out["hook_dead"] = (await js.stream_info(dead_stream_name(prefix))).state.messages
        return out
    finally:
        await nc.close()


async def _prepare_streams(nats_url: str, prefix: str, a: str, b: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        await js.add_stream(messages_stream_config(prefix, 4, 1))
        await js.add_stream(name=deadletter_stream_name(prefix),
                            subjects=[deadletter_subject(prefix)])
        for who, text in ((a, f"I live in {A_WORDS[0]}."), (b, f"I live in {B_WORD}.")):
            letter = DeadLetter(reason="test", stage="processing", agent_id=who,
                                subject=message_subject(who, prefix), payload=text)
            await js.publish(deadletter_subject(prefix), letter.model_dump_json().encode())
        # the change stream (fact texts) and the webhook dead letters (undelivered changes)
        await js.add_stream(name=changes_stream_name(prefix), subjects=[f"{prefix}.changes.>"])
        await js.add_stream(name=dead_stream_name(prefix), subjects=[f"{prefix}.webhooks.dead.>"])
        for who, text in ((a, f"Ana lives in {A_WORDS[1]}."), (b, f"Bo lives in {B_WORD}.")):
            change = json.dumps({"kind": "fact.added", "agent_id": who, "text": text}).encode()
            await js.publish(changes_subject(who, prefix), change)
            await js.publish(f"{prefix}.webhooks.dead.hook1", change)
        erased = json.dumps({"kind": "agent.erased", "agent_id": a}).encode()
        await js.publish(changes_subject(a, prefix), erased)  # kept: it tells of the erasure
    finally:
        await nc.close()
    async with MessagePublisher(nats_url, prefix) as pub:
        for i, word in enumerate(A_WORDS):
            await pub.publish(ConversationMessage(agent_id=a, message_id=f"a{i}",
                                                  text=f"I live in {word}."))
        await pub.publish(ConversationMessage(agent_id=b, message_id="b1",
                                              text=f"I live in {B_WORD}."))


def test_erase_deletes_the_agents_turns_and_dead_letters_from_nats(
    nats_url: str, fresh_schema: Any
) -> None:
    prefix = f"erz{uuid.uuid4().hex[:8]}"
    a, b = "nats-a", "nats-b"
    asyncio.run(_prepare_streams(nats_url, prefix, a, b))
    assert asyncio.run(_stream_state(nats_url, prefix, a, b)) == {
        "a": 3, "b": 1, "dead": 2, "changes_a": 2, "changes_b": 1, "hook_dead": 2}
    _schema, env = fresh_schema("erzn")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as memory:
        memory.write(a, f"I live in {A_WORDS[0]}.", message_id="a0")
        memory.nats_url = nats_url
        memory.subject_prefix = prefix  # type: ignore[attr-defined]
        result = memory.erase_agent(a)
    # 3 turns + 1 change (the erasure marker's change stays); 1 ingest + 1 webhook dead letter
    assert (result.stream_messages_deleted, result.dead_letters_deleted) == (4, 2)
    assert asyncio.run(_stream_state(nats_url, prefix, a, b)) == {
        "a": 0, "b": 1, "dead": 1, "changes_a": 1, "changes_b": 1, "hook_dead": 1}
