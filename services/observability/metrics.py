"""Prometheus metrics of one ``Memory`` (``/metrics``), in a registry of its own.

Why a registry per ``Memory`` instead of prometheus-client's global one: a process may hold
several (tests, a bench next to a server), and the global registry refuses a second metric of
the same name. Counters are incremented where things happen (a retrieve, a projector restart,
an LLM call that raised); values that already live elsewhere — projection positions in
PostgreSQL, the ingest service's tallies — are read at scrape time by collectors, so there is
one source of truth and nothing to keep in sync.

Series (all prefixed ``engramdb_``):
``retrieve_seconds`` (histogram), ``llm_errors_total``, ``projector_restarts_total{projection}``,
``dead_letters_total``, ``ingest_messages_total{outcome}``, ``ingest_pending_messages``
(not yet delivered to this consumer, as of its last delivery, plus deliveries in progress),
``projection_lag_events{projection}``, ``projection_position{projection}``,
``event_log_head``, ``projector_up{projection}`` (in-process projectors only),
``webhook_delivered_total{webhook}``, ``webhook_failed_attempts_total{webhook}``,
``webhook_dead_letters_total{webhook}``, ``webhook_pending_changes{webhook}`` (ADR-0049: read
from the registry's stats table, which the dispatcher updates every couple of seconds).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from engramdb.domain.ports import LLMProvider

log = logging.getLogger(__name__)

# retrieve is tens of milliseconds warm; the tail (rerank, cold caches) reaches seconds
RETRIEVE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class LagSnapshot:
    """Log head, per-projection positions and in-process liveness, read at scrape time."""

    head: int
    positions: Mapping[str, int | None]
    up: Mapping[str, bool] = field(default_factory=dict)


class _LagCollector(Collector):
    def __init__(self, read: Callable[[], LagSnapshot]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        try:
            snap = self.read()
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail with the database
            log.warning("metrics: projection lag unreadable: %s: %s", type(exc).__name__, exc)
            return
        head = GaugeMetricFamily("engramdb_event_log_head", "Max notification id of the event log")
        head.add_metric([], snap.head)
        lag = GaugeMetricFamily(
            "engramdb_projection_lag_events",
            "Events in the log not yet applied by the projection",
            labels=["projection"],
        )
        position = GaugeMetricFamily(
            "engramdb_projection_position",
            "Last notification id applied by the projection",
            labels=["projection"],
        )
        for name, pos in snap.positions.items():
            lag.add_metric([name], max(snap.head - (pos or 0), 0))
            position.add_metric([name], pos or 0)
        yield from (head, lag, position)
        if snap.up:
            up = GaugeMetricFamily(
                "engramdb_projector_up",
                "1 while this process's projector follows the log",
                labels=["projection"],
            )
            for name, alive in snap.up.items():
                up.add_metric([name], 1.0 if alive else 0.0)
            yield up


class _IngestCollector(Collector):
    """The ingest service's own tallies (``IngestService.stats``) as counters."""

    def __init__(self, stats: Mapping[str, int], pending: Callable[[], int]) -> None:
        self.stats = stats
        self.pending = pending

    def collect(self) -> Iterator[Metric]:
        dead = CounterMetricFamily(
            "engramdb_dead_letters", "Messages dead-lettered (never storable)"
        )
        dead.add_metric([], self.stats.get("dead_lettered", 0))
        outcomes = CounterMetricFamily(
            "engramdb_ingest_messages", "Ingest deliveries by outcome", labels=["outcome"]
        )
        for key in sorted(self.stats):
            outcomes.add_metric([key], self.stats[key])
        pending = GaugeMetricFamily(
            "engramdb_ingest_pending_messages",
            "Messages not yet processed by this consumer (undelivered + in progress)",
        )
        pending.add_metric([], self.pending())
        yield from (dead, outcomes, pending)


class _PendingCollector(Collector):
    """Messages an LLM outage left unextracted (ADR-0014), counted at scrape time."""

    def __init__(self, count: Callable[[], int]) -> None:
        self.count = count

    def collect(self) -> Iterator[Metric]:
        try:
            value = self.count()
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail with the database
            log.warning("metrics: pending extractions unreadable: %s: %s", type(exc).__name__, exc)
            return
        gauge = GaugeMetricFamily(
            "engramdb_extraction_pending",
            "Recorded messages whose extraction an LLM outage deferred (re-extracted when it is back)",
        )
        gauge.add_metric([], value)
        yield gauge


class _WebhookCollector(Collector):
    """Webhook deliveries per hook (``WebhookStats`` rows), read at scrape time."""

    def __init__(self, read: Callable[[], Sequence[Any]]) -> None:
        self.read = read

    def collect(self) -> Iterator[Metric]:
        try:
            rows = self.read()
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail with the database
            log.warning("metrics: webhook stats unreadable: %s: %s", type(exc).__name__, exc)
            return
        families = {
            "delivered": CounterMetricFamily("engramdb_webhook_delivered",
                                             "Changes delivered (2xx) per webhook", labels=["webhook"]),
            "failed_attempts": CounterMetricFamily(
                "engramdb_webhook_failed_attempts",
                "Delivery attempts answered non-2xx or not at all", labels=["webhook"]),
            "dead_lettered": CounterMetricFamily(
                "engramdb_webhook_dead_letters",
                "Changes dead-lettered after the webhook's max_attempts", labels=["webhook"]),
        }
        pending = GaugeMetricFamily(
            "engramdb_webhook_pending_changes",
            "Changes of the stream a webhook has not settled yet (its consumer's lag)",
            labels=["webhook"])
        for row in rows:
            for key, family in families.items():
                family.add_metric([row.webhook_id], getattr(row, key))
            if row.pending is not None:
                pending.add_metric([row.webhook_id], row.pending)
        yield from (*families.values(), pending)


class Metrics:
    """The registry and the instruments of one ``Memory``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.retrieve_seconds = Histogram(
            "engramdb_retrieve_seconds", "Retrieve latency (seconds)",
            buckets=RETRIEVE_BUCKETS, registry=self.registry,
        )
        self.llm_errors = Counter(
            "engramdb_llm_errors", "LLM calls that raised (timeouts, HTTP errors, refusals)",
            registry=self.registry,
        )
        self.projector_restarts = Counter(
            "engramdb_projector_restarts", "Projectors restarted after an error",
            labelnames=["projection"], registry=self.registry,
        )
        self._undelivered = 0
        self._in_flight = 0
        self._ingest_registered = False

    def watch_projections(self, read: Callable[[], LagSnapshot]) -> None:
        self.registry.register(_LagCollector(read))

    def watch_pending(self, count: Callable[[], int]) -> None:
        self.registry.register(_PendingCollector(count))

    def watch_webhooks(self, read: Callable[[], Sequence[Any]]) -> None:
        self.registry.register(_WebhookCollector(read))

    def watch_ingest(self, stats: Mapping[str, int]) -> None:
        """Expose an ingest service's tallies (one ingest service per ``Memory``)."""
        if self._ingest_registered:
            return
        self._ingest_registered = True
        self.registry.register(_IngestCollector(stats, lambda: self._undelivered + self._in_flight))

    def ingest_received(self, raw: Any) -> None:
        """A delivery started; JetStream tells how many messages wait behind it."""
        self._in_flight += 1
        with contextlib.suppress(Exception):  # not a JetStream delivery: nothing to learn
            self._undelivered = int(raw.metadata.num_pending)

    def ingest_settled(self) -> None:
        self._in_flight = max(self._in_flight - 1, 0)

    def count_llm_errors(self, llm: LLMProvider | None) -> LLMProvider | None:
        return None if llm is None else CountingLLM(llm, self.llm_errors)

    def exposition(self) -> bytes:
        """The Prometheus text format (runs the collectors: call off the event loop)."""
        return bytes(generate_latest(self.registry))


class CountingLLM:
    """An ``LLMProvider`` that counts the calls of the wrapped one that raise (and re-raises)."""

    def __init__(self, inner: LLMProvider, errors: Counter) -> None:
        self.inner = inner
        self.errors = errors
        self.name = inner.name

    def complete(
        self,
        messages: Sequence[dict[str, Any]],
        temperature: float = 0,
        response_format: dict[str, Any] | None = None,
        max_tokens: int | None = None,
    ) -> str:
        try:
            return self.inner.complete(
                messages, temperature=temperature, response_format=response_format,
                max_tokens=max_tokens,
            )
        except Exception:
            self.errors.inc()
            raise

    def __getattr__(self, attr: str) -> Any:  # model, timeout, ... of the wrapped provider
        return getattr(self.inner, attr)
