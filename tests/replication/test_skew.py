"""How far a replica's clock may run ahead of its master's (``replication.skew``),
and the shard clock a promoted node holds back by it (``clock.ShardClock``)."""

from __future__ import annotations

import time

from delayq.clock import ShardClock
from delayq.replication.skew import WINDOW_S, ClockSkew


def test_the_bound_is_the_least_offset_plus_transit_seen_lately() -> None:
    s = ClockSkew()
    assert s.ahead_ms(0.0) == 0, "nothing seen: nothing to hold back"
    # this clock runs 2000 ms ahead; transits of 30, 5 and 12 ms
    for at, transit in ((1.0, 30), (2.0, 5), (3.0, 12)):
        s.observe(sent_ms=10_000, got_ms=10_000 + 2000 + transit, at_s=at)
    assert s.ahead_ms(3.0) == 2005, "an upper bound on the offset, the tightest seen"
    s.observe(sent_ms=0, got_ms=99_999, at_s=3.5)  # an unstamped chunk says nothing
    assert s.ahead_ms(3.5) == 2005
    assert s.ahead_ms(2.0 + WINDOW_S + 0.1) == 2012, "old chunks are forgotten"
    assert s.ahead_ms(10 * WINDOW_S) == 0


def test_a_clock_running_behind_holds_nothing_back() -> None:
    s = ClockSkew()
    s.observe(sent_ms=10_000, got_ms=8_010, at_s=1.0)
    assert s.ahead_ms(1.0) == 0


def test_the_shard_clock_is_held_back_and_the_hold_only_grows() -> None:
    c = ShardClock()
    wall = time.time_ns() // 1_000_000
    assert abs(c.now_ms() - wall) < 1000
    c.hold_back(5000)
    c.hold_back(100)
    assert c.held_back_ms == 5000
    assert abs(c.now_ms() - (time.time_ns() // 1_000_000 - 5000)) < 1000
    # a wait for a due time counts on the held-back clock: due "now" by it is due
    assert c.timeout_s(c.now_ms() + 2000) > 1.0
    assert c.timeout_s(c.now_ms() - 1) == 0.0
