"""The latest dead letters with their reasons (issue 23): read back from the dead-letter
stream the ingest consumer writes (``<prefix>.deadletter.messages``, ADR-0012), newest
first, at most ``limit`` of them, by JetStream direct gets — nothing is consumed or acked, so
reading them changes nothing. No stream yet (no dead letter ever) is an empty list."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats

from engramdb.services.management.inspect_models import DeadLetterItem
from engramdb.services.write.messages import DEADLETTER_PREVIEW_BYTES, deadletter_stream_name


def _item(seq: int, data: bytes) -> DeadLetterItem:
    try:
        body: dict[str, Any] = json.loads(data)
    except ValueError:
        body = {"reason": "unreadable dead letter", "stage": "?", "subject": "?"}
    preview = body.get("payload") or body.get("payload_preview") or ""
    return DeadLetterItem(
        seq=seq, reason=str(body.get("reason", "")), stage=str(body.get("stage", "")),
        agent_id=body.get("agent_id"), subject=str(body.get("subject", "")),
        payload_preview=str(preview)[:DEADLETTER_PREVIEW_BYTES],
        by_reference=bool(body.get("by_reference", False)),
    )


async def _latest(nats_url: str, prefix: str, limit: int, timeout: float) -> list[DeadLetterItem]:
    nc = await nats.connect(nats_url, connect_timeout=timeout, max_reconnect_attempts=0,
                            allow_reconnect=False)
    try:
        js = nc.jetstream(timeout=timeout)
        stream = deadletter_stream_name(prefix)
        try:
            info = await js.stream_info(stream)
        except nats.js.errors.NotFoundError:
            return []
        items: list[DeadLetterItem] = []
        seq = info.state.last_seq
        while seq >= max(1, info.state.first_seq) and len(items) < limit:
            try:
                raw = await js.get_msg(stream, seq)
                items.append(_item(seq, raw.data or b""))
            except nats.js.errors.NotFoundError:
                pass  # deleted by retention between the info and the get
            seq -= 1
        return items
    finally:
        await nc.close()


def latest_dead_letters(
    nats_url: str, prefix: str, limit: int = 50, timeout: float = 2.0
) -> list[DeadLetterItem]:
    """The newest ``limit`` dead letters (blocking; run it off the event loop)."""
    return asyncio.run(_latest(nats_url, prefix, limit, timeout))
