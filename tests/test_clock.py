"""The clocks' two times (``delayq.clock``): a fake clock's wall and monotonic
times move together and only when told; a held-back shard clock holds back the
wall clock only."""

from __future__ import annotations

import pytest

from delayq.clock import FAKE_MONOTONIC_START_S, FakeClock, ShardClock, SystemClock


def test_a_fake_clocks_monotonic_time_moves_with_its_wall_clock_only_when_told() -> None:
    c = FakeClock(5_000)
    assert c.monotonic_s() == FAKE_MONOTONIC_START_S > 0, "as since a boot: 0.0 is long past"
    assert c.monotonic_s() == c.monotonic_s(), "no time passes unless told"
    c.advance(1_500)
    assert (c.now_ms(), c.monotonic_s()) == (6_500, FAKE_MONOTONIC_START_S + 1.5)
    c.set(10_000)
    assert (c.now_ms(), c.monotonic_s()) == (10_000, FAKE_MONOTONIC_START_S + 5.0)
    c.set(10_000)
    assert c.monotonic_s() == FAKE_MONOTONIC_START_S + 5.0
    with pytest.raises(ValueError, match="backwards"):
        c.advance(-1)
    with pytest.raises(ValueError, match="backwards"):
        c.set(9_999)
    assert (c.now_ms(), c.monotonic_s()) == (10_000, FAKE_MONOTONIC_START_S + 5.0)


def test_a_fake_clocks_millisecond_steps_add_up_exactly() -> None:
    """A deadline of whole milliseconds is reached exactly, not a rounding later."""
    c = FakeClock()
    deadline = c.monotonic_s() + 0.75
    for _ in range(749):
        c.advance(1)
    assert c.monotonic_s() < deadline
    c.advance(1)
    assert c.monotonic_s() >= deadline


@pytest.mark.parametrize("make", [SystemClock, ShardClock])
def test_a_real_clocks_monotonic_time_never_goes_back(make: type[SystemClock]) -> None:
    c = make()
    seen = [c.monotonic_s() for _ in range(1000)]
    assert seen == sorted(seen)


def test_holding_the_shard_clock_back_leaves_its_monotonic_time() -> None:
    c = ShardClock()
    before = c.monotonic_s()
    c.hold_back(60_000)
    assert c.held_back_ms == 60_000
    assert c.monotonic_s() >= before, "a lease or a hold is not stretched by the skew"
