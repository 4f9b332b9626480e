"""A process's claim on an embedded server survives a clock change (``embedded_base``).

The claims name their owner by pid and start time. psutil's start time adds the boot time of
``/proc/stat``, whole seconds the kernel derives from the wall clock: a clock slewed during a
run moves it by a second, the owner of a claim looked dead, and the next release stopped the
server under it. The start time is now seconds since boot."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from engramdb.infra import embedded_base
from engramdb.infra.embedded_base import ClientRegistry, process_alive, process_start_time

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.fixture
def move_the_clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Call it to make psutil's boot time one second later, as after the wall clock was
    slewed past a second."""
    import psutil._pslinux as pslinux

    real = pslinux.boot_time
    return lambda: monkeypatch.setattr(pslinux, "boot_time", lambda: real() + 1.0)


def test_a_start_time_is_seconds_since_boot_and_names_one_process() -> None:
    started = process_start_time(os.getpid())
    assert started is not None and 0 < started < embedded_base._EPOCH_FORM
    assert process_start_time(os.getpid()) == started
    assert abs(started - (psutil.Process().create_time() - psutil.boot_time())) < 0.05
    assert process_alive(os.getpid(), started)
    assert not process_alive(os.getpid(), started + 0.5)  # a recycled pid: another process


def test_a_claim_outlives_a_clock_change(tmp_path: Path, move_the_clock: Callable[[], None]) -> None:
    registry = ClientRegistry(tmp_path / "claims")
    registry.register()  # written with the clock as it is now
    move_the_clock()
    assert registry.live_count() == 1, "the owner still runs: its claim must count"


def test_an_older_release_claim_in_the_epoch_form_still_counts(move_the_clock: Callable[[], None]) -> None:
    """A claim an older release wrote (psutil's epoch form, before the clock moved) is its
    owner's within the boot time's one-second steps; a start far from it is not."""
    written = psutil.Process().create_time()
    move_the_clock()
    assert written > embedded_base._EPOCH_FORM
    assert process_alive(os.getpid(), written)
    assert not process_alive(os.getpid(), written - 5.0)
