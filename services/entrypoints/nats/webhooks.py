"""Webhook deliveries (ADR-0049): the change stream, POSTed to registered URLs, signed.

Each webhook has its own durable JetStream consumer on ``<PREFIX>_CHANGES`` (``webhook-<id>``),
starting at the hook's registration time, so a hook that is down keeps its place and catches up
when it is back, and a slow or dead receiver delays only its own deliveries — never ingest or
retrieve, which do not wait on the stream at all. A delivery is ``POST <url>`` with the change as
its JSON body and headers ``Engramdb-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret,
"<t>.<body>")>``, ``Engramdb-Delivery: <dedupe id>`` (the change's ``schema:position``: a
receiver dedupes on it) and ``Engramdb-Event: <kind>``. A 2xx is delivered; anything else (or
no answer within the timeout) is retried with exponential backoff (``backoff`` seconds,
doubled, capped at ``max_backoff``) up to the hook's ``max_attempts``, then the change goes to
``<prefix>.webhooks.dead.<id>`` (stream ``<PREFIX>_WEBHOOK_DEAD``) with the last error, and the
consumer moves on. Redirects are not followed (a redirect could point anywhere the
registration check refused).

How it stays alive and current:
- **One change in flight per hook** (``max_ack_pending=1``, fetched one at a time), so a
  hook's deliveries keep stream order; while a change is retried the consumer is told it is in
  progress, so a short ``ack_wait`` only matters when this process dies: the change is then
  redelivered within ``ack_wait`` to the next dispatcher instead of after an hour.
- **Supervised**: a hook's loop that fails (a lost broker, a fetch that times out in a way the
  client library did not wrap — nats-py's batch fetch raises a bare ``asyncio.TimeoutError``,
  which is what once killed every hook's deliveries at once) is logged and restarted on its
  own; the connection is re-made if the broker goes away.
- **The registry is re-read** every ``refresh_sec`` when the dispatcher is given a loader:
  a hook registered while ``serve`` runs gets its consumer (from its registration time, so the
  changes committed since are delivered too), a deleted one is stopped and its consumer
  removed.
- **Counted**: ``stats`` per hook (``delivered``, ``failed_attempts``, ``dead_lettered``) in
  this process; with ``on_stats`` the increments, each hook's pending changes (consumer lag)
  and its last error are handed over every ``refresh_sec`` (``serve`` writes them to the
  registry's stats table, which ``/metrics`` and ``engramdb status`` read).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig
from nats.js.errors import NotFoundError

from engramdb.services.entrypoints.nats.changes import changes_stream_name
from engramdb.services.entrypoints.nats.loop_thread import LoopThread
from engramdb.services.management.webhooks import Webhook
from engramdb.services.write.messages import DEFAULT_PREFIX, deadletter_max_age

log = logging.getLogger(__name__)
CONSUMER_PREFIX = "webhook-"
#: ``on_stats(increments per hook, pending per hook, last error per hook)``
StatsSink = Callable[[Mapping[str, Mapping[str, int]], Mapping[str, int], Mapping[str, str]], None]


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


def dead_stream_name(prefix: str = DEFAULT_PREFIX) -> str:
    return changes_stream_name(prefix).replace("_CHANGES", "_WEBHOOK_DEAD")


def retry_window(max_attempts: int, backoff: float = 1.0, max_backoff: float = 60.0) -> float:
    """Seconds from a change's first attempt to its last: how long a receiver may be down
    without a dead letter (8 attempts at 1 s..60 s: 123 s)."""
    total, wait = 0.0, backoff
    for _ in range(max_attempts - 1):
        total += wait
        wait = min(wait * 2, max_backoff)
    return total


class WebhookDispatcher(LoopThread):
    """Delivers the change stream to ``hooks``: a list (served as is) or a loader re-read every
    ``refresh_sec`` (``serve`` passes the registry). ``start()`` / ``stop()``."""

    thread_name = "engramdb-webhooks"

    def __init__(self, hooks: list[Webhook] | Callable[[], list[Webhook]], nats_url: str,
                 prefix: str = DEFAULT_PREFIX, *, backoff: float = 1.0, max_backoff: float = 60.0,
                 timeout: float = 5.0, ack_wait: float = 30.0, refresh_sec: float = 2.0,
                 on_stats: StatsSink | None = None, dead_max_age: float | None = None) -> None:
        """``dead_max_age``: seconds a dead letter is kept (default the dead-letter streams'
        ``ENGRAMDB_NATS_DEADLETTER_MAX_AGE_DAYS``, 30 days; 0 = forever)."""
        super().__init__()
        self.dead_max_age = deadletter_max_age() if dead_max_age is None else max(0.0, float(dead_max_age))
        self._load: Callable[[], list[Webhook]] = hooks if callable(hooks) else (lambda: list(hooks))
        self._follows_registry = callable(hooks)
        self.nats_url, self.prefix = nats_url, prefix
        self.backoff, self.max_backoff, self.timeout = backoff, max_backoff, timeout
        self.ack_wait, self.refresh_sec, self.on_stats = ack_wait, refresh_sec, on_stats
        self.stream = changes_stream_name(prefix)
        self.hooks: dict[str, Webhook] = {}  # being served
        self.stats: dict[str, Counter[str]] = {}
        self.pending: dict[str, int] = {}
        self._unreported: dict[str, Counter[str]] = {}
        self._errors: dict[str, str] = {}

    # ----- the loop: connection, registry, supervision ---------------------------------------

    async def _run(self) -> None:
        while not self.stopping:
            try:
                nc = await nats.connect(self.nats_url, max_reconnect_attempts=-1)
                try:
                    await self._dispatch(nc.jetstream())
                finally:
                    await nc.close()
            except Exception:  # a lost broker: log, wait, reconnect; consumers keep the place
                log.exception("webhook dispatcher failed; resuming")
                await asyncio.sleep(1.0)

    async def _dispatch(self, js: Any) -> None:
        await self._declare_dead_stream(js)
        tasks: dict[str, asyncio.Task[None]] = {}
        first = True
        async with httpx.AsyncClient(timeout=self.timeout, follow_redirects=False) as http:
            try:
                while not self.stopping:
                    await self._refresh(js, http, tasks, first)
                    first = False
                    await self._report(js)
                    deadline = time.monotonic() + self.refresh_sec
                    while not self.stopping and time.monotonic() < deadline:
                        await asyncio.sleep(0.1)
            finally:
                for task in tasks.values():
                    task.cancel()
                await asyncio.gather(*tasks.values(), return_exceptions=True)
                await self._report(js)

    async def _declare_dead_stream(self, js: Any) -> None:
        """The dead-letter stream of the deliveries, kept ``dead_max_age`` seconds (a letter is
        a change — fact text of the agent — that no receiver took; 0 = forever). An existing
        stream is brought to the current age, so changing the setting takes effect."""
        config = StreamConfig(name=dead_stream_name(self.prefix), subjects=[f"{self.prefix}.webhooks.dead.>"],
                              max_age=self.dead_max_age)
        try:
            info = await js.stream_info(config.name)
        except NotFoundError:
            await js.add_stream(config=config)
            return
        if float(info.config.max_age or 0) != float(self.dead_max_age):
            info.config.max_age = self.dead_max_age
            await js.update_stream(config=info.config)

    async def _refresh(self, js: Any, http: httpx.AsyncClient, tasks: dict[str, asyncio.Task[None]],
                       first: bool) -> None:
        try:
            loaded = {h.webhook_id: h for h in await asyncio.to_thread(self._load)}
        except Exception as exc:  # noqa: BLE001 - the registry unreadable: keep serving what we have
            log.warning("webhook registry unreadable, keeping %d hook(s): %s", len(tasks), exc)
            return
        for hook_id in [h for h in tasks if h not in loaded]:  # deleted
            tasks.pop(hook_id).cancel()
            self.hooks.pop(hook_id, None)
            await self._drop_consumer(js, hook_id)
            log.info("webhook %s deleted: deliveries stopped", hook_id)
        for hook_id, hook in loaded.items():
            if hook_id not in tasks:
                self.hooks[hook_id] = hook
                self.stats.setdefault(hook_id, Counter())
                tasks[hook_id] = asyncio.create_task(self._supervise(js, http, hook))
        if first and self._follows_registry:
            await self._drop_orphans(js, set(loaded))

    async def _drop_consumer(self, js: Any, hook_id: str) -> None:
        with contextlib.suppress(NotFoundError):
            await js.delete_consumer(self.stream, CONSUMER_PREFIX + hook_id)

    async def _drop_orphans(self, js: Any, registered: set[str]) -> None:
        """Consumers of hooks deleted while no dispatcher ran."""
        try:
            consumers = await js.consumers_info(self.stream)
        except NotFoundError:
            return
        for info in consumers:
            name = info.name or ""
            if name.startswith(CONSUMER_PREFIX) and name[len(CONSUMER_PREFIX):] not in registered:
                await self._drop_consumer(js, name[len(CONSUMER_PREFIX):])

    async def _supervise(self, js: Any, http: httpx.AsyncClient, hook: Webhook) -> None:
        while not self.stopping:
            try:
                await self._serve(js, http, hook)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - one hook's failure never stops the others
                log.warning("webhook %s: delivery loop failed (%s: %s); restarting",
                            hook.webhook_id, type(exc).__name__, exc)
                await asyncio.sleep(1.0)

    async def _report(self, js: Any) -> None:
        for hook_id in list(self.hooks):
            with contextlib.suppress(Exception):
                info = await js.consumer_info(self.stream, CONSUMER_PREFIX + hook_id)
                self.pending[hook_id] = int(info.num_pending or 0) + int(info.num_ack_pending or 0)
        if self.on_stats is None:
            return
        deltas, errors = self._unreported, self._errors
        self._unreported, self._errors = {}, {}
        pending = {h: n for h, n in self.pending.items() if h in self.hooks}
        try:
            await asyncio.to_thread(self.on_stats, deltas, pending, errors)
        except Exception as exc:  # noqa: BLE001 - counted again next time
            log.warning("webhook stats not recorded: %s", exc)
            for hook_id, counts in deltas.items():
                self._unreported.setdefault(hook_id, Counter()).update(counts)
            self._errors = {**errors, **self._errors}

    def _count(self, hook_id: str, what: str) -> None:
        self.stats.setdefault(hook_id, Counter())[what] += 1
        self._unreported.setdefault(hook_id, Counter())[what] += 1

    # ----- one hook ------------------------------------------------------------------------

    async def _serve(self, js: Any, http: httpx.AsyncClient, hook: Webhook) -> None:
        start = ({"deliver_policy": DeliverPolicy.BY_START_TIME, "opt_start_time": hook.created_at}
                 if hook.created_at is not None else {"deliver_policy": DeliverPolicy.NEW})
        while True:  # the change stream may not exist yet
            try:
                sub = await js.pull_subscribe(
                    f"{self.prefix}.changes.>", durable=CONSUMER_PREFIX + hook.webhook_id,
                    stream=self.stream, config=ConsumerConfig(
                        ack_policy=AckPolicy.EXPLICIT, ack_wait=self.ack_wait, max_deliver=-1,
                        max_ack_pending=1, **start))  # from registration on
                break
            except NotFoundError:
                await asyncio.sleep(0.5)
        try:
            while True:
                try:  # one at a time: a batch would wait out its expiry behind max_ack_pending=1
                    msgs = await sub.fetch(1, timeout=1.0)
                except TimeoutError:  # nats' and asyncio's (both are TimeoutError)
                    continue
                for msg in msgs:
                    await self._handle(js, http, hook, msg)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _handle(self, js: Any, http: httpx.AsyncClient, hook: Webhook, msg: Any) -> None:
        change = json.loads(msg.data)
        if hook.matches(str(change.get("agent_id", ""))):
            error = await self._deliver(http, hook, msg, change)
            if error is not None:
                await js.publish(f"{self.prefix}.webhooks.dead.{hook.webhook_id}", msg.data, headers={
                    "Engramdb-Webhook": hook.webhook_id, "Engramdb-Dead-Reason": error[:500],
                    "Engramdb-Delivery": (msg.headers or {}).get("Nats-Msg-Id", "")})
                self._count(hook.webhook_id, "dead_lettered")
        await msg.ack()

    async def _deliver(self, http: httpx.AsyncClient, hook: Webhook, msg: Any,
                       change: dict[str, Any]) -> str | None:
        """None when delivered; else the last error after ``max_attempts``."""
        body, headers = msg.data, msg.headers or {}
        wait, error = self.backoff, "not attempted"
        for attempt in range(1, hook.max_attempts + 1):
            ts = int(time.time())
            try:
                answer = await http.post(hook.url, content=body, headers={
                    "Content-Type": "application/json",
                    "Engramdb-Signature": signature(hook.secret or "", ts, body),
                    "Engramdb-Delivery": headers.get("Nats-Msg-Id", ""),
                    "Engramdb-Event": str(change.get("kind", "")),
                })
                if 200 <= answer.status_code < 300:
                    self._count(hook.webhook_id, "delivered")
                    return None
                error = f"HTTP {answer.status_code}"
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            self._count(hook.webhook_id, "failed_attempts")
            self._errors[hook.webhook_id] = error[:500]
            if attempt < hook.max_attempts:
                await self._backoff(msg, wait)
                wait = min(wait * 2, self.max_backoff)
        return f"{hook.max_attempts} attempts, last: {error}"

    async def _backoff(self, msg: Any, seconds: float) -> None:
        """Sleep ``seconds``, telling JetStream the change is in progress well within
        ``ack_wait`` so it is not redelivered behind our back."""
        step = max(self.ack_wait / 3, 0.1)
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            await msg.in_progress()
            await asyncio.sleep(min(step, left))
