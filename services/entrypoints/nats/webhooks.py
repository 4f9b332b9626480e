"""Webhook deliveries (ADR-0049): the change stream, POSTed to registered URLs, signed.

Each webhook has its own durable JetStream consumer on ``<PREFIX>_CHANGES`` (``webhook-<id>``),
so a hook that is down keeps its place and catches up when it is back, and a slow or dead
receiver delays only its own deliveries — never ingest or retrieve, which do not wait on the
stream at all. A delivery is ``POST <url>`` with the change as its JSON body and headers
``Engramdb-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>``,
``Engramdb-Delivery: <dedupe id>`` (the change's ``schema:position``: a receiver dedupes on
it) and ``Engramdb-Event: <kind>``. A 2xx is delivered; anything else (or no answer within the
timeout) is retried with exponential backoff (``backoff`` seconds, doubled, capped) up to the
hook's ``max_attempts``, then the change goes to ``<prefix>.webhooks.dead.<id>`` (stream
``<PREFIX>_WEBHOOK_DEAD``) with the last error, and the consumer moves on. Redirects are not
followed (a redirect could point anywhere the registration check refused).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import threading
import time
from collections import Counter
from typing import Any

import httpx
import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig
from nats.js.errors import NotFoundError

from engramdb.services.entrypoints.nats.changes import changes_stream_name
from engramdb.services.management.webhooks import Webhook
from engramdb.services.write.messages import DEFAULT_PREFIX

log = logging.getLogger(__name__)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(secret: str, header: str, body: bytes, tolerance_sec: float = 300.0) -> bool:
    """What a receiver runs: the signature matches and is recent."""
    try:
        fields = dict(part.split("=", 1) for part in header.split(","))
        ts = int(fields["t"])
    except (ValueError, KeyError):
        return False
    if abs(time.time() - ts) > tolerance_sec:
        return False
    return hmac.compare_digest(signature(secret, ts, body), header)


class _Stopping(Exception):
    """Stop asked mid-retry: the change stays unacked, for the next dispatcher."""


def dead_stream_name(prefix: str = DEFAULT_PREFIX) -> str:
    return changes_stream_name(prefix).replace("_CHANGES", "_WEBHOOK_DEAD")


class WebhookDispatcher:
    """Delivers to ``hooks`` (with their secrets) from the change stream; ``start``/``stop``.
    ``stats`` counts ``delivered``, ``retried``, ``dead`` per webhook id (for status/metrics)."""

    def __init__(self, hooks: list[Webhook], nats_url: str, prefix: str = DEFAULT_PREFIX, *,
                 backoff: float = 1.0, max_backoff: float = 60.0, timeout: float = 5.0) -> None:
        self.hooks, self.nats_url, self.prefix = hooks, nats_url, prefix
        self.backoff, self.max_backoff, self.timeout = backoff, max_backoff, timeout
        self.stats: dict[str, Counter[str]] = {h.webhook_id: Counter() for h in hooks}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> WebhookDispatcher:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()),
                                        name="engramdb-webhooks", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    async def _run(self) -> None:
        nc = await nats.connect(self.nats_url, max_reconnect_attempts=-1)
        try:
            js = nc.jetstream()
            try:
                await js.stream_info(dead_stream_name(self.prefix))
            except NotFoundError:
                await js.add_stream(config=StreamConfig(
                    name=dead_stream_name(self.prefix), subjects=[f"{self.prefix}.webhooks.dead.>"]))
            async with httpx.AsyncClient(timeout=self.timeout, follow_redirects=False) as http:
                await asyncio.gather(*(self._serve(js, http, hook) for hook in self.hooks))
        finally:
            await nc.close()

    async def _serve(self, js: Any, http: httpx.AsyncClient, hook: Webhook) -> None:
        stream = changes_stream_name(self.prefix)
        while not self._stop.is_set():  # the change stream may not exist yet
            try:
                sub = await js.pull_subscribe(
                    f"{self.prefix}.changes.>", durable=f"webhook-{hook.webhook_id}", stream=stream,
                    config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=3600.0,
                                          deliver_policy=DeliverPolicy.NEW,  # from registration on
                                          max_ack_pending=1))
                break
            except NotFoundError:
                await asyncio.sleep(0.5)
        else:
            return
        while not self._stop.is_set():
            try:
                msgs = await sub.fetch(16, timeout=0.5)
            except nats.errors.TimeoutError:
                continue
            for msg in msgs:  # in stream order: one at a time per hook
                try:
                    await self._handle(js, http, hook, msg)
                except _Stopping:
                    return

    async def _handle(self, js: Any, http: httpx.AsyncClient, hook: Webhook, msg: Any) -> None:
        change = json.loads(msg.data)
        if hook.matches(str(change.get("agent_id", ""))):
            error = await self._deliver(http, hook, msg.data, change, msg.headers or {})
            if error is not None:
                self.stats[hook.webhook_id]["dead"] += 1
                await js.publish(f"{self.prefix}.webhooks.dead.{hook.webhook_id}", msg.data, headers={
                    "Engramdb-Webhook": hook.webhook_id, "Engramdb-Dead-Reason": error[:500],
                    "Engramdb-Delivery": (msg.headers or {}).get("Nats-Msg-Id", "")})
        await msg.ack()

    async def _deliver(self, http: httpx.AsyncClient, hook: Webhook, body: bytes,
                       change: dict[str, Any], headers: dict[str, str]) -> str | None:
        """None when delivered; else the last error after ``max_attempts``."""
        wait, error = self.backoff, "not attempted"
        for attempt in range(1, hook.max_attempts + 1):
            if self._stop.is_set():
                raise _Stopping
            ts = int(time.time())
            try:
                answer = await http.post(hook.url, content=body, headers={
                    "Content-Type": "application/json",
                    "Engramdb-Signature": signature(hook.secret or "", ts, body),
                    "Engramdb-Delivery": headers.get("Nats-Msg-Id", ""),
                    "Engramdb-Event": str(change.get("kind", "")),
                })
                if 200 <= answer.status_code < 300:
                    self.stats[hook.webhook_id]["delivered"] += 1
                    return None
                error = f"HTTP {answer.status_code}"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            if attempt < hook.max_attempts:
                self.stats[hook.webhook_id]["retried"] += 1
                await asyncio.sleep(wait)
                wait = min(wait * 2, self.max_backoff)
        return f"{hook.max_attempts} attempts, last: {error}"
