"""``engramdb demo``: the whole product in one minute, on the embedded default.

Publishes a short conversation onto NATS (JetStream), lets the ingest consumer turn it into
decisions, then shows the events, the read models, a rebuild, a fact's history, memory "as of"
a past moment and a few retrievals with their scores.

Why the demo erases its agent at the end (unless ``--keep``): it runs on the user's real
store (the embedded default), and every run used to leave a ``demo-ana-<timestamp>`` agent
among the user's own (issue 27). Erasure (ADR-0018) leaves only the marker.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from engramdb.infra.database import resolve_nats
from engramdb.infra.nats_auth import redact_url
from engramdb.infra.settings import Settings, load_settings
from engramdb.services.entrypoints.nats.ingest import IngestThread, build_ingest_app
from engramdb.services.entrypoints.nats.publisher import publish_message
from engramdb.services.entrypoints.serve.server import ingest_scaling
from engramdb.services.memory.facade import Memory
from engramdb.services.write.messages import ConversationMessage

CONVERSATION: list[tuple[str, str, str]] = [
    ("s1", "Ana", "Hi! I'm Ana. I live in Recife and I work at Vertix as a data engineer."),
    ("s1", "Ana", "My husband Bruno loves football and plays every Sunday."),
    ("s1", "Ana", "I love hiking in the mountains."),
    ("s2", "Ana", "Big news: I moved to Porto Alegre last week."),
    ("s2", "Ana", "I live in Porto Alegre."),
    ("s2", "Ana", "Eu gosto de chimarrão."),
]
AGENT = "demo-ana"
QUERIES = ["Where does Ana live?", "What does Bruno like?", "Onde a Ana mora?", "oi"]


def _line(title: str) -> None:
    print(f"\n=== {title} " + "=" * max(0, 60 - len(title)))


def _publish(memory: Memory, nats_url: str, turns: list[tuple[str, str, str]], first: int,
             results: list, prefix: str) -> list[str]:
    """Publish turns in order and wait until each has been processed — by this process's
    consumer or by another's: a running ``engramdb serve`` on the same data may hold the
    partition the demo's agent hashes to (ADR-0020), and then its consumer takes the turns.
    Processed by anyone means recorded in the conversation log (``mem_messages``)."""
    expected: list[str] = []
    for i, (session, speaker, text) in enumerate(turns, start=first + 1):
        message = ConversationMessage(
            agent_id=AGENT, message_id=f"demo-{i}", session_id=session, speaker=speaker, text=text
        )
        publish_message(nats_url, message, prefix=prefix)
        expected.append(message.message_id)
        print(f"  published {message.message_id}: {text}")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        missing = set(expected) - {r.message_id for r in results}
        if not missing or missing <= _recorded(memory, sorted(missing)):
            break
        time.sleep(0.1)
    return expected


def _recorded(memory: Memory, message_ids: list[str]) -> set[str]:
    """The demo agent's turns already in the conversation log, whoever processed them."""
    with memory.cell(AGENT).pool.connection() as conn:
        rows = conn.execute(
            "SELECT message_id FROM mem_messages WHERE agent_id = %s AND message_id = ANY(%s)",
            (AGENT, message_ids),
        ).fetchall()
    return {row[0] for row in rows}


def _decisions(memory: Memory, published: list[str], results: list) -> None:
    """Each turn's decisions: this process's results, or the log's for a turn another
    process's consumer decided."""
    here = {r.message_id: r for r in results}
    elsewhere: dict[str, list[str]] = {}
    if any(message_id not in here for message_id in published):
        for entry in memory.history(AGENT):
            if entry.message_id is not None:
                text = entry.text or entry.entity_key or ""
                elsewhere.setdefault(entry.message_id, []).append(f"{entry.decision} {text}")
    for message_id in sorted(published):
        result = here.get(message_id)
        if result is not None:
            kinds = ", ".join(f"{d.kind} {d.text or d.entity_key}" for d in result.decisions)
            note = " (already processed)" if result.duplicate else ""
        else:
            kinds = ", ".join(elsewhere.get(message_id, []))
            note = " (decided by another process's consumer)"
        print(f"  {message_id}{note}: {kinds or 'nothing to remember'}")


def run_demo(keep: bool = False) -> None:
    global AGENT
    # a new agent each run, so a second run shows the same story instead of duplicates
    AGENT = "demo-ana-" + datetime.now(UTC).strftime("%Y%m%d%H%M%S")
    settings = load_settings()
    with Memory.open(settings) as memory:
        published, results, before_move = _ingest(memory, settings)
        _line("decisions, per message")
        _decisions(memory, published, results)
        updated = _show_log_and_read_models(memory)
        _line("rebuild every read model from the log (no LLM, no re-embedding)")
        print(f"  {memory.rebuild().model_dump_json()}")
        if updated is not None:
            _show_fact_history(memory, updated)
        _show_time_travel(memory, before_move)
        _show_retrieves(memory)
        _line("clean-up")
        if keep:
            print(f"  kept agent {AGENT}: `engramdb list-facts --agent {AGENT}` shows its facts")
        else:
            memory.erase_agent(AGENT, actor="engramdb demo", via="cli")
            print(f"  erased agent {AGENT}: the demo leaves nothing readable in your memory "
                  "(`engramdb demo --keep` keeps it)")


def _ingest(memory: Memory, settings: Settings) -> tuple[list[str], list, datetime]:
    """Publish the conversation onto NATS and let an in-process ingest service decide it:
    the first session, then an instant to ask "as of" later, then the second session."""
    nats_url = resolve_nats(settings)
    _line(f"publishing {len(CONVERSATION)} messages onto NATS ({redact_url(nats_url)})")
    results: list = []
    app, _broker = build_ingest_app(
        nats_url, memory.ingest_pipeline(), prefix=settings.subject_prefix, on_result=results.append,
        **ingest_scaling(memory, settings),
    )
    with IngestThread(app):
        published = _publish(memory, nats_url, CONVERSATION[:3], 0, results,
                             settings.subject_prefix)
        before_move = datetime.now(UTC)
        time.sleep(0.05)
        published += _publish(memory, nats_url, CONVERSATION[3:], 3, results,
                              settings.subject_prefix)
    if {r.message_id for r in results} >= set(published):
        memory.wait_for_projections(max((r.position for r in results), default=None),
                                    agent_id=AGENT)
    else:  # some were decided elsewhere: their positions are not ours to know
        memory.wait_for_projections(agent_id=AGENT)
    return published, results, before_move


def _show_log_and_read_models(memory: Memory) -> str | None:
    """Print the agent's events and its read models; return the id of the first fact that
    superseded another (the move), whose history is shown next."""
    _line("events in the log (agent aggregate)")
    for entry in memory.history(AGENT):
        print(
            f"  v{entry.version:<3} {entry.event:<20} {entry.fact_id or entry.entity_key or ''}"
            f" {entry.text or ''}"[:110]
        )
    _line("read models: active facts and entities")
    with memory.cell(AGENT).pool.connection() as conn:
        for row in conn.execute(
            "SELECT fact_id, status, reinforcement_count, fact_text FROM mem_facts "
            "WHERE agent_id = %s ORDER BY valid_from, fact_id",
            (AGENT,),
        ):
            print(f"  {row[0]} {row[1]:<10} x{row[2]} {row[3]}")
        for row in conn.execute(
            "SELECT entity_key, display_name FROM mem_entities WHERE agent_id = %s "
            "ORDER BY entity_key",
            (AGENT,),
        ):
            print(f"  entity {row[0]} ({row[1]})")
        updated = conn.execute(
            "SELECT fact_id FROM mem_facts WHERE agent_id = %s AND supersedes_fact_id IS NOT NULL "
            "ORDER BY valid_from LIMIT 1",
            (AGENT,),
        ).fetchone()
    return None if updated is None else str(updated[0])


def _show_fact_history(memory: Memory, fact_id: str) -> None:
    entries = memory.history(AGENT, fact_id)
    extractors = sorted({str(e.decided_by.get("extractor")) for e in entries if e.decided_by.get("extractor")})
    by = f" (decided by {', '.join(extractors)})" if extractors else ""
    _line(f"history of fact {fact_id}{by}")
    for entry in entries:
        print(f"  {entry.decision:<8} {entry.fact_id} {entry.text or ''} (message {entry.message_id})")


def _show_time_travel(memory: Memory, before_move: datetime) -> None:
    _line(f"facts as of {before_move.isoformat(timespec='seconds')}, before the move (from the log)")
    for snapshot in memory.facts_as_of(AGENT, before_move):
        print(f"  {snapshot.fact_id} {snapshot.text}")
    _line("retrieve 'Where does Ana live?' as of that moment")
    print(memory.retrieve(AGENT, "Where does Ana live?", as_of=before_move).context)


def _show_retrieves(memory: Memory) -> None:
    for query in QUERIES:
        _line(f"retrieve: {query!r}")
        result = memory.retrieve(AGENT, query)
        print(result.context or f"  (nothing: plan={result.plan.strategy}/{result.plan.reason})")
        for fact in result.facts:
            print(f"  score {fact.score:.3f} {fact.fact_text}")
