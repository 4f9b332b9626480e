"""Job ``feedback``: retrieval notices of one agent → one ``RetrievalsObserved`` event.

Reads ``<prefix>.feedback.<agent-token>`` from the stream sequence after the last one the
agent's ``AgentJobs`` recorded, with an ephemeral consumer that acknowledges nothing: the
cursor lives in the event log, so a crash between reading and saving only re-reads, and a
notice is counted once (``AgentJobs.observe_retrievals`` refuses sequences it has seen).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from engramdb.infra.nats_auth import nats_servers
from engramdb.services.jobs.base import Job, JobContext
from engramdb.services.jobs.feedback_stream import feedback_stream_name, feedback_subject

FETCH_BATCH = 1000


@dataclass
class Notices:
    counts: dict[str, int] = field(default_factory=dict)
    last_at: dict[str, str] = field(default_factory=dict)
    notices: int = 0
    through_sequence: int = 0

    def add(self, sequence: int, payload: dict[str, Any]) -> None:
        at = str(payload.get("at", ""))
        for fact_id in dict.fromkeys(payload.get("fact_ids") or []):
            fact_id = str(fact_id)
            self.counts[fact_id] = self.counts.get(fact_id, 0) + 1
            if at and at > self.last_at.get(fact_id, ""):  # same-offset ISO strings sort
                self.last_at[fact_id] = at
        self.notices += 1
        self.through_sequence = max(self.through_sequence, sequence)


async def read_notices(ctx: JobContext, agent_id: str, after: int) -> Notices:
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
    from nats.js.errors import NotFoundError

    out = Notices()
    assert ctx.nats_url is not None
    nc = await nats.connect(nats_servers(ctx.nats_url), connect_timeout=5)
    try:
        js = nc.jetstream(timeout=5.0)
        try:
            info = await js.stream_info(feedback_stream_name(ctx.prefix))
        except NotFoundError:
            return out  # no retrieve ever sent feedback
        if info.state.last_seq <= after:
            return out
        sub = await js.pull_subscribe(
            feedback_subject(agent_id, ctx.prefix), stream=info.config.name,
            config=ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1,
                ack_policy=AckPolicy.NONE, inactive_threshold=30.0,
            ),
        )
        try:
            while True:
                ctx.check_deadline()
                try:
                    batch = await sub.fetch(FETCH_BATCH, timeout=1.0)
                except (nats.errors.TimeoutError, TimeoutError):  # nats-py raises either (issue 28)
                    break
                for msg in batch:
                    try:
                        payload = json.loads(msg.data)
                    except ValueError:
                        payload = {}
                    out.add(msg.metadata.sequence.stream, payload)
                if not batch or batch[-1].metadata.num_pending == 0:
                    break
        finally:
            await sub.unsubscribe()
    finally:
        await nc.close()
    return out


def run(ctx: JobContext, agent_id: str) -> int:
    if ctx.nats_url is None:
        return 0
    jobs = ctx.jobs_aggregate(agent_id)
    notices = asyncio.run(read_notices(ctx, agent_id, jobs.feedback_sequence))
    if not jobs.observe_retrievals(
        notices.counts, notices.last_at, notices.notices, notices.through_sequence
    ):
        return 0
    ctx.save(jobs)
    return 1


JOB = Job("feedback", run, "retrieval notices from the feedback stream -> RetrievalsObserved")
