"""Export → import of one agent's log on a REAL PostgreSQL (ADR-0049): a second memory in a
fresh schema (another deployment's store) gets the same facts as of three instants and the
same retrieve results; importing twice inserts nothing; a malformed, truncated or edited file
is refused with its line and nothing is written; an erased agent exports nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engramdb.domain.erasure import AgentErasedError
from engramdb.infra.providers.scripted import HashEmbedder
from engramdb.services.management.import_log import ImportRefused
from engramdb.services.memory.facade import Memory

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
TURNS = ["I live in Recife.", "I work at Vertix.", "I like sushi.", "I moved to Porto.",
         "My sister Bia lives in Lisbon.", "I don't like sushi anymore, I like ramen."]


def _open(fresh_schema: Any, name: str) -> Memory:
    _schema, env = fresh_schema(name)
    return Memory.open(env=env, embedder=HashEmbedder(384), llm=None, quiet=True)


@pytest.fixture
def memories(fresh_schema: Any) -> Iterator[tuple[Memory, Memory]]:
    source, target = _open(fresh_schema, "exsrc"), _open(fresh_schema, "exdst")
    try:
        yield source, target
    finally:
        source.close()
        target.close()


def _seed(memory: Memory, agent: str) -> list[datetime]:
    for i, text in enumerate(TURNS):
        memory.write(agent, text, speaker="Ana", message_id=f"m{i}", session_id="s1",
                     occurred_at=T0 + timedelta(days=i))
    memory.write(agent, "Just a note, no facts please.", message_id="raw", infer=False)
    memory.add_facts(agent, [{"subject": "Ana", "text": "Ana is vegetarian", "sources": ["m2"]}])
    memory.wait_for_projections()
    events = memory.history(agent)
    return [events[2].recorded_at, events[len(events) // 2].recorded_at, datetime.now(UTC)]


def _facts(memory: Memory, agent: str, at: datetime) -> list[tuple[Any, ...]]:
    return [(f.fact_id, f.text, f.status, f.valid_from, f.valid_to, f.recorded_at)
            for f in memory.facts_as_of(agent, at)]


def _retrieved(memory: Memory, agent: str, query: str) -> tuple[Any, ...]:
    r = memory.retrieve(agent, query)
    return ([(f.fact_id, round(f.score, 6)) for f in r.facts], r.context)


def test_export_import_round_trip(memories: tuple[Memory, Memory], agent_id: str) -> None:
    source, target = memories
    instants = _seed(source, agent_id)
    lines = list(source.export_agent(agent_id))
    header, end = json.loads(lines[0]), json.loads(lines[-1])
    assert header["format"] == "engramdb-export" and header["version"] == 1
    assert end["events"] == len(lines) - 2 and "Recife" in "\n".join(lines)  # in clear

    first = target.import_agent(lines)
    assert first.inserted == first.events == len(lines) - 2 and first.already_present == 0
    target.wait_for_projections()
    for at in instants:
        assert _facts(target, agent_id, at) == _facts(source, agent_id, at), at
    for query in ("Where does Ana live?", "What food does Ana like?", "Bia"):
        assert _retrieved(target, agent_id, query) == _retrieved(source, agent_id, query), query
    assert [m.message_id for m in target.list_messages(agent_id).items] == \
        [m.message_id for m in source.list_messages(agent_id).items]

    head = target.app.recorder.max_notification_id()
    again = target.import_agent(lines)
    assert again.inserted == 0 and again.already_present == first.events
    assert target.app.recorder.max_notification_id() == head
    # the imported agent lives on: a new turn there is decided on the imported memory
    later = target.write(agent_id, "I work at Vertix.", speaker="Ana", message_id="new")
    assert "NOOP" in [d.kind for d in later.decisions] and "ADD" not in [d.kind for d in later.decisions]


def test_bad_files_are_refused_whole(memories: tuple[Memory, Memory], agent_id: str) -> None:
    source, target = memories
    _seed(source, agent_id)
    lines = list(source.export_agent(agent_id))
    head = target.app.recorder.max_notification_id() or 0

    def refused(bad: list[str]) -> ImportRefused:
        with pytest.raises(ImportRefused) as caught:
            target.import_agent(bad)
        assert (target.app.recorder.max_notification_id() or 0) == head  # nothing written
        return caught.value

    assert refused(lines[:5] + ["{oops"] + lines[6:]).line == 6
    assert "truncated" in refused(lines[:-1]).reason
    edited = json.loads(lines[3])
    edited["state"]["text"] = "edited"
    assert "sha256" in refused(lines[:3] + [json.dumps(edited)] + lines[4:]).reason
    evil = json.loads(lines[3])
    evil["topic"] = "os:system"
    assert refused(lines[:3] + [json.dumps(evil)] + lines[4:]).line == 4
    assert refused(lines[:3] + lines[4:]).line in (4, len(lines) - 1)  # a gap in versions
    header = json.loads(lines[0])
    header["version"] = 99
    assert "version" in refused([json.dumps(header), *lines[1:]]).reason
    assert refused([]).line == 0


def test_an_erased_agent_exports_nothing(memories: tuple[Memory, Memory], agent_id: str) -> None:
    source, _target = memories
    _seed(source, agent_id)
    exported = list(source.export_agent(agent_id))
    source.erase_agent(agent_id, actor="dpo")
    with pytest.raises(AgentErasedError):
        next(iter(source.export_agent(agent_id)))
    # nor can its old export bring it back into the memory that erased it
    with pytest.raises(AgentErasedError):
        source.import_agent(exported)
