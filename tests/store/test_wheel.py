"""The timer wheel file (``store/wheel``)."""

from __future__ import annotations

from pathlib import Path

from delayq.store.wheel import TimerWheel


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
