"""Group sizes of the overlapped fold+load (ADR-0036): a log is cut in at least
``PIPELINE_GROUPS`` groups so folds overlap loads, never in groups below ``MIN_GROUP_EVENTS``
(a small log is one pass) nor above the memory bound."""

from __future__ import annotations

from engramdb.projections.rebuild import (
    GROUP_EVENTS,
    MIN_GROUP_EVENTS,
    PIPELINE_GROUPS,
    pipeline_group_events,
)


def test_group_sizes() -> None:
    assert pipeline_group_events(100_140, GROUP_EVENTS) == -(-100_140 // PIPELINE_GROUPS)
    assert pipeline_group_events(1_000_000, GROUP_EVENTS) == GROUP_EVENTS  # memory bound
    assert pipeline_group_events(3_000, GROUP_EVENTS) == MIN_GROUP_EVENTS  # one pass
    assert pipeline_group_events(10**6, 1) == 1  # an explicit small bound wins (tests)
    assert pipeline_group_events(10**6, 0) == 0  # 0: one pass over the whole log
