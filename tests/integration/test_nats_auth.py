"""NATS credentials and subject permissions of the embedded server (ADR-0011), on the session's
real NATS: anonymous and wrong-password clients are refused; a publisher identity publishes
and retrieves for its agent only, cannot read the message stream, answer or intercept
``engramdb.retrieve``, read other clients' replies, or delete streams; the service still
works end to end."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.errors import Error as NatsError

from engramdb.infra import nats_auth
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.infra.settings import Settings
from engramdb.services.entrypoints.nats.ingest import IngestThread, build_ingest_app
from engramdb.services.entrypoints.nats.publisher import MessagePublisher
from engramdb.services.entrypoints.nats.retrieve import create_retrieve_broker, handle_request
from engramdb.services.entrypoints.nats.users import Publisher, create_publisher
from engramdb.services.memory.facade import Memory
from engramdb.services.write.messages import (
    ConversationMessage,
    agent_token,
    message_subject,
    messages_stream_name,
)

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("ENGRAMDB_TEST_NATS_URL")), reason="permissions of the embedded NATS"
)
PREFIX = "engramdb"  # the default prefix: its stream is the one a publisher identity may see


@pytest.fixture(scope="module")
async def publisher(embedded_data_dir: Path, nats_url: str) -> Publisher:
    async with MessagePublisher(nats_url, PREFIX):  # the service declares the stream
        pass
    settings = Settings(data_dir=embedded_data_dir, nats_url=None)
    return create_publisher(settings, [f"pub-agent-{uuid.uuid4().hex[:8]}"])


def _bare(url: str) -> str:
    return "nats://" + url.rsplit("@", 1)[-1]


async def _connect(pub: Publisher, errors: list[str]) -> Any:
    async def collect(exc: Exception) -> None:
        errors.append(str(exc))

    return await nats.connect(pub.url, inbox_prefix=pub.inbox_prefix, error_cb=collect,
                              allow_reconnect=False, connect_timeout=3)


async def test_files_are_private(embedded_data_dir: Path, nats_url: str) -> None:
    folder = embedded_data_dir / nats_auth.AUTH_DIR
    assert os.stat(folder).st_mode & 0o777 == 0o700
    for name in ("users.json", "nats-server.conf"):
        assert os.stat(folder / name).st_mode & 0o777 == 0o600


async def test_a_publisher_without_the_stream_is_told_what_to_do(publisher: Publisher) -> None:
    with pytest.raises(RuntimeError, match="engramdb serve"):
        async with MessagePublisher(publisher.url, "nostream", 1.0, inbox_prefix=publisher.inbox_prefix):
            pass


@pytest.mark.parametrize("credentials", ["", "engramdb:wrong@", "nobody:x@"])
async def test_unauthenticated_clients_are_refused(nats_url: str, credentials: str) -> None:
    with pytest.raises(NatsError, match="Authorization Violation"):
        await nats.connect(_bare(nats_url).replace("//", "//" + credentials), allow_reconnect=False,
                           connect_timeout=3, max_reconnect_attempts=0)


async def test_publisher_publishes_for_its_agent_only(publisher: Publisher, nats_url: str) -> None:
    agent = publisher.agents[0]
    text = f"hello {uuid.uuid4().hex}"
    async with MessagePublisher(publisher.url, PREFIX, 3.0, inbox_prefix=publisher.inbox_prefix) as pub:
        ack = await pub.publish(ConversationMessage(agent_id=agent, text=text))
        assert ack.stream == messages_stream_name(PREFIX)
        with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
            await pub.publish(ConversationMessage(agent_id="someone-else", text="forged"))
    service = await nats.connect(nats_url)
    try:
        stored = message_subject(agent, PREFIX).replace(".messages.", ".messages.*.")  # <p>.<token> (ADR-0020)
        last = await service.jetstream().get_last_msg(messages_stream_name(PREFIX), stored)
        assert json.loads(last.data)["text"] == text  # it reached the stream the ingest reads
    finally:
        await service.close()


async def test_publisher_cannot_read_intercept_or_manage(publisher: Publisher, nats_url: str) -> None:
    errors: list[str] = []
    nc = await _connect(publisher, errors)
    try:
        for subject in (f"{PREFIX}.retrieve", f"{PREFIX}.retrieve.*", f"{PREFIX}.messages.>", "_INBOX.>", ">"):
            await nc.subscribe(subject)
        await nc.flush()
        await asyncio.sleep(0.3)
        denied = " ".join(errors)
        for subject in (f"{PREFIX}.retrieve", f"{PREFIX}.messages.>", "_INBOX.>"):
            assert f'permissions violation for subscription to "{subject.lower()}"' in denied.lower()
        forbidden = [f"{PREFIX}.deadletter.messages", message_subject("someone-else", PREFIX),
                     "$JS.API.STREAM.PURGE." + messages_stream_name(PREFIX)]
        for subject in forbidden:
            await nc.publish(subject, b"{}")
        await nc.flush()
        await asyncio.sleep(0.3)
        for subject in forbidden:
            assert f'permissions violation for publish to "{subject.lower()}"' in " ".join(errors).lower()
        js = nc.jetstream(timeout=1.0)
        for attempt in (js.delete_stream(messages_stream_name(PREFIX)),
                        js.add_stream(name="ROGUE", subjects=["rogue.>"])):
            with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
                await attempt
        with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
            await nc.request(f"{PREFIX}.retrieve", b"{}", timeout=1.0)  # the all-agents subject
    finally:
        await nc.close()
    service = await nats.connect(nats_url)
    try:
        info = await service.jetstream().stream_info(messages_stream_name(PREFIX))
        assert info.config.name == messages_stream_name(PREFIX)  # still there
    finally:
        await service.close()


@pytest.fixture
def memory(fresh_schema: Any) -> Iterator[Memory]:
    _schema, env = fresh_schema("natsauth")
    with Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True) as mem:
        yield mem


async def test_end_to_end_through_a_publisher_identity(
    embedded_data_dir: Path, nats_url: str, memory: Memory
) -> None:
    """publisher identity publishes → service ingest writes → publisher retrieves its agent."""
    prefix = f"auth{uuid.uuid4().hex[:8]}"
    agent = f"e2e-{uuid.uuid4().hex[:8]}"
    async with MessagePublisher(nats_url, prefix):  # as `engramdb serve` does: service declares
        pass
    pub = create_publisher(Settings(data_dir=embedded_data_dir, subject_prefix=prefix), [agent])
    written: list[Any] = []
    ingest = IngestThread(build_ingest_app(nats_url, memory.pipeline, prefix=prefix,
                                           on_result=written.append)[0]).start()
    broker = create_retrieve_broker(memory, nats_url, subject=f"{prefix}.retrieve")
    await broker.start()
    nc = await _connect(pub, [])
    try:
        async with MessagePublisher(pub.url, prefix, 3.0, inbox_prefix=pub.inbox_prefix) as producer:
            await producer.publish(ConversationMessage(agent_id=agent, text="I live in Recife.", speaker="Ana"))
        for _ in range(200):
            if written:
                break
            await asyncio.sleep(0.05)
        assert written and written[0].agent_id == agent
        own = f"{prefix}.retrieve.{agent_token(agent)}"
        body = {"agent_id": agent, "query": "Where does Ana live?", "wait_for": written[0].position}
        reply = json.loads((await nc.request(own, json.dumps(body).encode(), timeout=10)).data)
        assert "Recife" in reply["result"]["context"]
        reply = json.loads((await nc.request(own, json.dumps({"agent_id": "x-1", "query": "q"}).encode(), timeout=10)).data)
        assert reply["error_type"] == "forbidden"
        for subject in (f"{prefix}.retrieve.{agent_token('x-1')}", f"{prefix}.retrieve"):
            with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
                await nc.request(subject, json.dumps({"agent_id": "x-1", "query": "q"}).encode(), timeout=1.0)
    finally:
        await nc.close()
        await broker.stop()
        ingest.stop()


async def test_agent_subject_serves_only_its_agent() -> None:
    body = json.dumps({"agent_id": "a-1", "query": "q"})
    reply = await handle_request(None, body, subject_token=agent_token("a-2"))
    assert reply["error_type"] == "forbidden"


async def test_a_server_started_without_credentials_is_replaced(tmp_path_factory: pytest.TempPathFactory) -> None:
    import shutil
    import tempfile

    from engramdb.infra.embedded_base import read_json, write_json
    from engramdb.infra.embedded_nats import ensure_nats

    data_dir = Path(tempfile.mkdtemp(prefix="engramdb-natsauth-", dir="/tmp"))
    try:
        first = ensure_nats(data_dir, stop_on_exit=False)
        state_path = data_dir / "run" / "nats.json"
        state = read_json(state_path)
        del state["auth"]  # what a server from before credentials left behind
        write_json(state_path, state)
        second = ensure_nats(data_dir, stop_on_exit=False)
        assert second.started and second.pid != first.pid
        with pytest.raises(NatsError, match="Authorization Violation"):
            await nats.connect(_bare(second.url), allow_reconnect=False, connect_timeout=3)
        nc = await nats.connect(second.url)
        await nc.close()
        first.stop()
        second.stop()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def test_external_nats_credentials_and_redaction() -> None:
    from engramdb.infra.database import resolve_nats

    settings = Settings(nats_url="nats://a:4222,nats://b:4222", nats_user="svc", nats_password="p@ss")
    url = resolve_nats(settings)
    assert url == "nats://svc:p@ss@a:4222,nats://svc:p@ss@b:4222"  # nats-py does not %-decode
    assert "p@ss" not in nats_auth.redact_url(url) and "svc:***@a" in nats_auth.redact_url(url)
    with pytest.raises(ValueError, match="ENGRAMDB_NATS_PASSWORD"):
        resolve_nats(Settings(nats_url="nats://a:4222", nats_user="svc", nats_password="a/b"))
    assert resolve_nats(Settings(nats_url="nats://a:4222")) == "nats://a:4222"
