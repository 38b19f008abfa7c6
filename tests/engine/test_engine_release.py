"""Engine release timing on real files with a fake clock: messages come out at
their exact ms, never early (a slot that fires ahead of its start included),
past times mean now, far-future messages roll, and the lateness of each release
is counted as consumers see it."""

from __future__ import annotations

import bisect

import pytest

import delayq
import delayq.engine
from delayq import FakeClock
from delayq.engine import CancelOutcome, MessageState, ScheduleRequest
from delayq.timers.memory.lateness import LATENCY_BUCKETS_MS
from tests.support.engines import (
    Make,
    drain,
    ids,
    req,
    run_until,
)


def test_messages_come_out_at_their_exact_ms_never_early(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    delays = [5, 950, 12, 499, 13, 260, 3000, 3001, 40]  # several share a 100 ms slot
    ids(e.schedule([req(d, body=str(d).encode()) for d in delays]))
    start = clock.now_ms()
    got: list[delayq.engine.ReceivedMessage] = []
    while clock.now_ms() < start + 4000:
        clock.advance(1)
        e.pump()
        got += drain(e)
    assert [int(m.body) for m in got] == sorted(delays)
    for m in got:
        assert m.delivered_ms == m.deliver_at_ms, "with a 1 ms clock step release is on the ms"
    assert e.observing.counters["early"] == 0


def test_a_slot_fires_ahead_of_its_start_yet_release_and_cancel_stay_exact(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()  # precision 100 ms: the scan leads by 50 ms
    lead = e.settings.scan_lead_ms
    assert lead == 50
    slot_start = (clock.now_ms() // 100 + 3) * 100
    first, doomed = ids(e.schedule([req(slot_start - clock.now_ms(), b"first")] * 2))
    run_until(e, clock, slot_start - lead, step_ms=1)
    assert e.observing.gauges()["release_buffer"] == 2, "fired early into the release buffer"
    late = ids(e.schedule([req(slot_start + 10 - clock.now_ms(), b"late")]))[0]
    e.pump()
    assert e.observing.gauges()["release_buffer"] == 3, (
        "linked into a fired slot: straight to release"
    )
    assert e.cancel([doomed]) == [CancelOutcome.CANCELLED]
    run_until(e, clock, slot_start - 1, step_ms=1)
    assert drain(e) == [], "nothing before its ms"
    got: list[delayq.engine.ReceivedMessage] = []
    while clock.now_ms() < slot_start + 20:
        clock.advance(1)
        e.pump()
        got += drain(e)
    assert [(m.id, m.delivered_ms - m.deliver_at_ms) for m in got] == [(first, 0), (late, 0)]


def test_past_time_means_now(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    out = e.schedule([ScheduleRequest(topic="t", body=b"a", deliver_at_ms=clock.now_ms() - 60_000)])
    assert out[0].deliver_at_ms == clock.now_ms()
    e.pump()
    assert [m.body for m in drain(e)] == [b"a"]


def test_far_future_rolls_and_cancel_works_after_any_number_of_rolls(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()  # window 10 s
    a, b, c = ids(e.schedule([req(95_000, b"a"), req(95_000, b"b"), req(47_000, b"c")]))
    run_until(e, clock, clock.now_ms() + 10_500)  # one roll (odd: RocketMQ #7991)
    assert e.observing.counters["rolled"] >= 3
    assert e.cancel([a]) == [CancelOutcome.CANCELLED]
    run_until(e, clock, clock.now_ms() + 20_000, step_ms=50)  # two more rolls
    assert e.cancel([c]) == [CancelOutcome.CANCELLED]  # cancelled in its last window
    run_until(e, clock, clock.now_ms() + 70_000, step_ms=50)
    got = drain(e)
    assert [m.body for m in got] == [b"b"]
    assert got[0].delivered_ms >= got[0].deliver_at_ms
    assert got[0].id == b, "a rolled message keeps its original id"
    assert e.lookup(a).state is MessageState.CANCELLED
    assert e.lookup(b).state is MessageState.DELIVERED
    assert e.observing.counters["rolled"] >= 9 + 4


def test_release_lateness_is_counted_per_message(make_engine: Make, clock: FakeClock) -> None:
    """Batches released in the ms they are due (one lateness for all) and batches
    spanning several ms (pumped 7 ms at a time) land in the right buckets."""
    e = make_engine()
    ids(e.schedule([req(100) for _ in range(50)]))
    run_until(e, clock, clock.now_ms() + 150, step_ms=1)
    assert e.observing.lateness_snapshot().counts.tolist()[0] == 50 and e.lateness()["count"] == 50
    ids(e.schedule([req(d) for d in range(1, 301)]))
    run_until(e, clock, clock.now_ms() + 400, step_ms=7)
    buckets = e.observing.lateness_snapshot().counts.tolist()
    assert sum(buckets) == 350 and e.observing.counters["early"] == 0
    assert sum(buckets[:5]) == 350, "7 ms steps release at most 6 ms late"
    assert sum(buckets[1:5]) > 0, "and some of them late"
    assert e.lateness()["p99"] <= 10


@pytest.mark.parametrize("step_ms", [7, 30])
def test_lateness_histogram_matches_what_consumers_see(
    make_engine: Make, clock: FakeClock, step_ms: int
) -> None:
    """Each released message lands in the bucket of its own lateness, whether a
    release step holds a few of several ms (7 ms steps: their bounds read from a
    list) or many (30 ms steps: numpy reductions)."""
    e = make_engine()
    ids(e.schedule([req(d) for d in range(1, 301)]))
    run_until(e, clock, clock.now_ms() + 400, step_ms=step_ms)
    got = drain(e)
    bounds = LATENCY_BUCKETS_MS
    expect = [0] * (len(bounds) + 1)
    for m in got:
        expect[bisect.bisect_left(bounds, m.delivered_ms - m.deliver_at_ms)] += 1
    assert len(got) == 300 and e.observing.lateness_snapshot().counts.tolist() == expect
    assert len([n for n in expect if n]) >= 4  # spread over several buckets, not one
