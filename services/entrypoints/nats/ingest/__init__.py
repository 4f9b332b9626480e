"""NATS JetStream ingest: conversation messages from the bus into the write pipeline.

Delivery policy (ADR-0004):
- **Ack after save.** The subscriber uses ``faststream.AckPolicy.MANUAL`` (not the default
  REJECT_ON_ERROR, which would drop a message on the first error); a message is acked only
  once ``WritePipeline.write`` returned, i.e. its events are in PostgreSQL.
- **Poison never loops.** A payload that fails validation (not JSON, wrong types, NUL
  bytes, too long) is published to the dead-letter stream with the reason, then acked.
- **Transient failures are bounded.** If the pipeline raises (database down...), the
  message is nacked with a growing delay; after ``max_deliver`` deliveries it goes to the
  dead-letter stream with the last error as the reason, and is acked.
- **An LLM outage loses nothing** (ADR-0014). If extraction fails transiently (LLM
  unreachable, timeout, 429, 5xx), the recorded message is nacked with the same backoff; on
  its ``extraction_attempts``-th delivery it is recorded as "extraction pending"
  (``ExtractionDeferred``) and acked; the retrier in ``serve`` extracts it when the LLM is back.
- **Per-agent order, agents in parallel.** A durable pull consumer fetches batches in
  stream order; one agent's messages take the agent's FIFO lock in that order and run one
  after another (in a worker thread: the pipeline is synchronous), different agents run
  concurrently up to ``max_concurrency`` threads. When one of an agent's messages fails,
  the ones queued behind it are nacked too, so a later message never overtakes an earlier
  one within a batch.
- **A fetched batch is recorded in one transaction.** Right after the turnstile, each valid
  message joins a pending list that one task saves with ``WritePipeline.record_many`` (one
  event-store transaction for all ``Recorded`` events that arrived meanwhile), *before* any
  of them is extracted; then each message is processed in its agent's chain as before. The
  decision saves of concurrent workers are coalesced by the pipeline's group commit. So a
  message costs ~1 transaction instead of 2, and "recorded before extraction" still holds.
  If the batch save fails, each message simply records itself in ``write``.
- **Duplicates are harmless.** Redeliveries (a crash before the ack) hit the pipeline's
  ``MessageRecord`` and become no-ops; publishers' ``Nats-Msg-Id`` drops re-publications.

One job per module: ``turnstile`` (consumer-sequence order), ``service`` (the handler:
validate, order per agent, write in a worker thread, settle), ``faststream_app`` (broker and
subscriber wiring), ``thread`` (the app in a daemon thread for synchronous hosts),
``asyncapi`` (the AsyncAPI document; ``python -m engramdb.services.entrypoints.nats.ingest``).
"""

from engramdb.services.entrypoints.nats.ingest.asyncapi import asyncapi_document
from engramdb.services.entrypoints.nats.ingest.faststream_app import (
    DEFAULT_DURABLE,
    build_ingest_app,
    run_ingest,
)
from engramdb.services.entrypoints.nats.ingest.service import IngestService
from engramdb.services.entrypoints.nats.ingest.thread import IngestThread

__all__ = [
    "DEFAULT_DURABLE",
    "IngestService",
    "IngestThread",
    "asyncapi_document",
    "build_ingest_app",
    "run_ingest",
]
