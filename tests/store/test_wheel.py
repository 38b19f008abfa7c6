"""The timer wheel file (``store/wheel``): slots, laps, the precision guard."""

from __future__ import annotations

from pathlib import Path

import pytest

from delayq.errors import CorruptData
from delayq.store.wheel import TimerWheel
from tests.store.records import T


def test_wheel_slots_share_a_place_every_two_windows(tmp_path: Path) -> None:
    # a wheel of 2 x 10 slots: slot 25 lives where slot 5 did, which then reads empty
    wheel = TimerWheel(tmp_path / "timerwheel", 20, 100, 0)
    try:
        wheel.put(5, 64, 64, 1)
        assert wheel.get(5) is not None
        wheel.put(25, 128, 128, 1)
        assert wheel.get(5) is None, "another lap's slot is empty"
        assert wheel.get(25) == (128, 128, 1)
    finally:
        wheel.close()


def test_wheel_slots_laps_and_precision_guard(tmp_path: Path) -> None:
    w = TimerWheel(tmp_path / "wheel", slots=8, precision_ms=100, now_ms=T)
    assert w.get(3) is None
    w.put(3, 100, 200, 2)
    assert w.get(3) == (100, 200, 2)
    assert w.get(11) is None, "same index, other lap: reads as empty"
    w.put(11, 300, 300, 1)
    assert w.get(3) is None
    assert [s for s, _ in w.occupied()] == [11]
    w.flush()
    w.close()
    w = TimerWheel(tmp_path / "wheel", slots=8, precision_ms=100, now_ms=T)
    assert w.get(11) == (300, 300, 1)
    w.close()
    with pytest.raises(CorruptData, match="precision"):
        TimerWheel(tmp_path / "wheel", slots=8, precision_ms=1000, now_ms=T)
