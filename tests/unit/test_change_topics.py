"""``projections.changes.may_be_change``: the change publisher decodes only notifications that
can be changes (ADR-0049), told by their stored topic — including topics stored before
ADR-0007 renamed the module (``domain.aggregate:…``), which must not be skipped."""

from __future__ import annotations

from eventsourcing.utils import get_topic

from engramdb.domain.aggregate import LEGACY_MODULE_TOPIC, AgentMemory, MessageRecord
from engramdb.domain.jobs import AgentJobs
from engramdb.projections.changes import _FACTS, may_be_change


def test_every_change_class_and_opened_are_decoded() -> None:
    for cls in (*_FACTS, AgentMemory.Opened):
        assert may_be_change(get_topic(cls)), cls


def test_legacy_module_topics_are_decoded_too() -> None:
    name = AgentMemory.FactAdded.__qualname__
    assert may_be_change(f"{LEGACY_MODULE_TOPIC}:{name}")


def test_turn_records_and_job_bookkeeping_are_skipped() -> None:
    for cls in (MessageRecord.Recorded, MessageRecord.Processed, AgentJobs.RetrievalsObserved):
        assert not may_be_change(get_topic(cls)), cls


def test_an_unknown_topic_is_left_to_the_decoder() -> None:
    assert may_be_change("nowhere.module:Nothing")
