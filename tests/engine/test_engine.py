"""Engine behaviour on real files with a fake clock: release timing, cancel,
reschedule, lookup, consumers, flow control, faults and restarts."""

from __future__ import annotations

import base64
import bisect
import fcntl
import json
import os
import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import crc32c
import pytest

import delayq
from delayq import (
    AckOutcome,
    CancelOutcome,
    Congested,
    Engine,
    EngineClosed,
    FailedPrecondition,
    FakeClock,
    InvalidArgument,
    MessageId,
    MessageState,
    NotFound,
    ScheduleRequest,
)
from delayq.store.readyindex import ReadyIndex
from delayq.store.timerlog import TimerLog
from delayq.timers import chainwalk, link
from delayq.timers.lateness import LATENCY_BUCKETS_MS
from delayq.timers.scan import Scanner
from tests.support.engines import START_MS, drain, ids, req, run_until, small_settings

Make = Callable[..., Engine]


def test_messages_come_out_at_their_exact_ms_never_early(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    delays = [5, 950, 12, 499, 13, 260, 3000, 3001, 40]  # several share a 100 ms slot
    ids(e.schedule([req(d, body=str(d).encode()) for d in delays]))
    start = clock.now_ms()
    got: list[delayq.ReceivedMessage] = []
    while clock.now_ms() < start + 4000:
        clock.advance(1)
        e.pump()
        got += drain(e)
    assert [int(m.body) for m in got] == sorted(delays)
    for m in got:
        assert m.delivered_ms == m.deliver_at_ms, "with a 1 ms clock step release is on the ms"
    assert e.counters["early"] == 0


def test_a_slot_fires_ahead_of_its_start_yet_release_and_cancel_stay_exact(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()  # precision 100 ms: the scan leads by 50 ms
    lead = e.settings.scan_lead_ms
    assert lead == 50
    slot_start = (clock.now_ms() // 100 + 3) * 100
    first, doomed = ids(e.schedule([req(slot_start - clock.now_ms(), b"first")] * 2))
    run_until(e, clock, slot_start - lead, step_ms=1)
    assert e.gauges()["release_buffer"] == 2, "fired early into the release buffer"
    late = ids(e.schedule([req(slot_start + 10 - clock.now_ms(), b"late")]))[0]
    e.pump()
    assert e.gauges()["release_buffer"] == 3, "linked into a fired slot: straight to release"
    assert e.cancel([doomed]) == [CancelOutcome.CANCELLED]
    run_until(e, clock, slot_start - 1, step_ms=1)
    assert drain(e) == [], "nothing before its ms"
    got: list[delayq.ReceivedMessage] = []
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
    assert e.counters["rolled"] >= 3
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
    assert e.counters["rolled"] >= 9 + 4


def test_cancel_outcomes_are_distinct(make_engine: Make, clock: FakeClock, batch_path: str) -> None:
    e = make_engine()
    a, b = ids(e.schedule([req(1000), req(10)]))
    run_until(e, clock, clock.now_ms() + 20)
    unknown = str(MessageId(0, 1, MessageId.parse(a).position + 3))
    foreign = str(MessageId(5, 1, MessageId.parse(a).position))
    out = e.cancel([a, a, b, unknown, foreign, "not-an-id"])
    assert out[:5] == [
        CancelOutcome.CANCELLED,
        CancelOutcome.ALREADY_CANCELLED,
        CancelOutcome.ALREADY_DELIVERED,
        CancelOutcome.NOT_FOUND,
        CancelOutcome.NOT_FOUND,
    ]
    assert isinstance(out[5], InvalidArgument) and out[5].field == "ids[5]"
    with pytest.raises(NotFound, match="shard 5"):
        e.lookup(foreign)
    with pytest.raises(InvalidArgument, match="id: malformed"):
        e.lookup("???")


def test_cancel_by_batch_reads_big_records_and_checks_epoch_and_range(
    make_engine: Make, clock: FakeClock, batch_path: str
) -> None:
    e = make_engine(max_body_bytes=100_000)
    big, small = ids(e.schedule([req(1000, b"b" * 70_000), req(1000)]))
    pos = MessageId.parse(big).position
    other_epoch = str(MessageId(0, 7, pos))
    past_end = str(MessageId(0, 1, e.gauges()["commitlog_end"] + 10))
    inside_body = str(MessageId(0, 1, pos + 5000))
    out = e.cancel([other_epoch, past_end, inside_body, big, small, big])
    assert out == [
        CancelOutcome.NOT_FOUND,
        CancelOutcome.NOT_FOUND,
        CancelOutcome.NOT_FOUND,
        CancelOutcome.CANCELLED,
        CancelOutcome.CANCELLED,
        CancelOutcome.ALREADY_CANCELLED,
    ]
    assert e.stats("t")[0].pending == 0 and e.stats("t")[0].cancelled == 2
    run_until(e, clock, clock.now_ms() + 1200)
    assert drain(e) == []


def test_cancel_of_nothing_valid_answers_per_id(make_engine: Make) -> None:
    e = make_engine()
    foreign = str(MessageId(5, 1, 100))
    assert e.cancel([]) == []
    out = e.cancel(["not-an-id", foreign])
    assert isinstance(out[0], InvalidArgument) and out[1] is CancelOutcome.NOT_FOUND


def test_cancel_of_a_well_formed_id_beyond_any_position_is_not_found(make_engine: Make) -> None:
    """A hand-made id whose position needs 9 bytes (no record can have it)."""
    e = make_engine()
    raw = bytes([0x4D, 0, 1]) + (2**70).to_bytes(9, "big")
    raw += bytes([crc32c.crc32c(raw) & 0xFF])
    huge = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    wide = str(MessageId(0, 1, 2**63 + 5))
    assert e.cancel([huge, wide]) == [CancelOutcome.NOT_FOUND, CancelOutcome.NOT_FOUND]


def test_cancel_of_an_id_inside_a_file_header_touches_no_other_message(
    make_engine: Make, clock: FakeClock
) -> None:
    """A hand-made id pointing into a later CommitLog segment's header, batched with
    a real id read in a separate span: the header id reads nothing (it must not
    borrow the next span's record and cancel that message)."""
    e = make_engine()
    sent = [i for _ in range(10) for i in ids(e.schedule([req(5000, bytes(2000))] * 10))]
    segments = e.inspect().commitlog.log.segments
    assert len(segments) >= 3
    in_header = str(MessageId(0, 1, segments[1].base + 5))
    far = next(i for i in sent if MessageId.parse(i).position > segments[1].base + 20_000)
    assert e.cancel([in_header, far]) == [CancelOutcome.NOT_FOUND, CancelOutcome.CANCELLED]
    assert e.stats("t")[0].cancelled == 1
    run_until(e, clock, clock.now_ms() + 5200)
    assert len(drain(e)) == 99


def test_release_lateness_is_counted_per_message(make_engine: Make, clock: FakeClock) -> None:
    """Batches released in the ms they are due (one lateness for all) and batches
    spanning several ms (pumped 7 ms at a time) land in the right buckets."""
    e = make_engine()
    ids(e.schedule([req(100) for _ in range(50)]))
    run_until(e, clock, clock.now_ms() + 150, step_ms=1)
    assert e.lateness_snapshot().counts.tolist()[0] == 50 and e.lateness()["count"] == 50
    ids(e.schedule([req(d) for d in range(1, 301)]))
    run_until(e, clock, clock.now_ms() + 400, step_ms=7)
    buckets = e.lateness_snapshot().counts.tolist()
    assert sum(buckets) == 350 and e.counters["early"] == 0
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
    assert len(got) == 300 and e.lateness_snapshot().counts.tolist() == expect
    assert len([n for n in expect if n]) >= 4  # spread over several buckets, not one


def test_receive_reads_scattered_records_of_any_size_whole(
    make_engine: Make, clock: FakeClock
) -> None:
    """Ready order (by due time) differs from log order, and bodies straddle the
    read-ahead: every message must come back byte for byte with key and headers."""
    e = make_engine(max_body_bytes=200_000, commitlog_segment_bytes=4 << 20)
    rnd = random.Random(5)
    sent = {}
    for _ in range(3):
        reqs = [
            req(
                rnd.randint(0, 2000),
                os.urandom(rnd.choice([10, 300, 600, 5000, 100_000])),
                key=rnd.choice(["", "k"]),
                headers=rnd.choice([{}, {"h": "v"}]),
            )
            for _ in range(100)
        ]
        for r, mid in zip(reqs, ids(e.schedule(reqs)), strict=True):
            sent[mid] = r
    run_until(e, clock, clock.now_ms() + 2100, step_ms=50)
    got = {m.id: m for m in drain(e)}
    assert got.keys() == sent.keys()
    for mid, r in sent.items():
        assert (got[mid].body, got[mid].key, got[mid].headers) == (r.body, r.key, r.headers)


def test_reschedule_is_atomic_and_keeps_the_message(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    (old,) = ids(e.schedule([req(5000, b"body", key="k1", headers={"h": "v"})]))
    new = e.reschedule(old, delay_ms=200)
    assert new.id and new.id != old
    with pytest.raises(FailedPrecondition, match="rescheduled"):
        e.reschedule(old, delay_ms=1)
    assert e.cancel([old]) == [CancelOutcome.ALREADY_CANCELLED]
    run_until(e, clock, clock.now_ms() + 300)
    (m,) = drain(e)
    assert (m.id, m.body, m.key, m.headers) == (new.id, b"body", "k1", {"h": "v"})
    assert e.lookup(old).state is MessageState.RESCHEDULED
    run_until(e, clock, clock.now_ms() + 6000, step_ms=100)
    assert drain(e) == []
    with pytest.raises(FailedPrecondition, match="delivered"):
        e.reschedule(new.id, delay_ms=5)
    with pytest.raises(InvalidArgument, match="delay_ms"):
        e.reschedule(new.id, delay_ms=-1)


def test_lookup_reports_state_topic_and_time(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    (a,) = ids(e.schedule([req(300, b"hi", topic="orders.eu-1")]))
    r = e.lookup(a)
    assert (r.state, r.topic, r.deliver_at_ms, r.body) == (
        MessageState.PENDING,
        "orders.eu-1",
        clock.now_ms() + 300,
        b"hi",
    )
    run_until(e, clock, clock.now_ms() + 301)
    assert e.lookup(a).state is MessageState.DELIVERED


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (ScheduleRequest(topic="", body=b"x"), "topic"),
        (ScheduleRequest(topic="a" * 129, body=b"x"), "topic"),
        (ScheduleRequest(topic="bad topic", body=b"x"), "topic"),
        (ScheduleRequest(topic="../etc", body=b"x"), "topic"),
        (ScheduleRequest(topic="t", body=b""), "body"),
        (ScheduleRequest(topic="t", body=b"x" * 1025), "body"),
        (ScheduleRequest(topic="t", body=b"x", delay_ms=-1), "delay_ms"),
        (ScheduleRequest(topic="t", body=b"x", delay_ms=10**12), "delay_ms"),
        (ScheduleRequest(topic="t", body=b"x", deliver_at_ms=2**62), "deliver_at_ms"),
        (ScheduleRequest(topic="t", body=b"x", deliver_at_ms=1, delay_ms=1), "deliver_at_ms"),
        (ScheduleRequest(topic="t", body=b"x", key="k" * 1025), "key"),
        (ScheduleRequest(topic="t", body=b"x", headers={"": "v"}), "headers"),
    ],
)
def test_bad_input_is_refused_per_item_naming_the_field(
    make_engine: Make, request_: ScheduleRequest, field: str
) -> None:
    e = make_engine(max_body_bytes=1024, max_delay_ms=86_400_000)
    out = e.schedule([req(10, b"ok"), request_])
    assert out[0].error is None
    err = out[1].error
    assert isinstance(err, InvalidArgument)
    assert err.field == field


def test_full_enqueue_queue_refuses_then_retry_succeeds(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine(enqueue_queue_messages=10)
    ids(e.schedule([req(100) for _ in range(8)]))
    end_before = e.gauges()["commitlog_end"]
    with pytest.raises(Congested) as err:
        e.schedule([req(100) for _ in range(5)])
    assert err.value.retry_after_ms > 0
    assert e.gauges()["commitlog_end"] == end_before, "a refused batch writes nothing"
    e.pump()  # the enqueue stage drains the queue
    assert len(ids(e.schedule([req(100) for _ in range(5)]))) == 5


def test_full_slot_refuses_the_overflow_per_item(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine(slot_limit=3)
    out = e.schedule([req(500) for _ in range(5)] + [req(900)])
    errors = [o.error for o in out]
    assert errors[:3] == [None, None, None] and errors[5] is None
    assert all(isinstance(x, Congested) for x in errors[3:5])
    e.pump()
    assert isinstance(e.schedule([req(500)])[0].error, Congested), "wheel count is kept"


def test_a_roll_slot_over_the_limit_refuses_nothing_and_passes_the_wheel_once_a_second(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Far-future messages all park in the window's last slot, which may hold more
    than ``slot_limit``: they are never refused for it, and while it keeps the fill
    bound high the full pass over the wheel runs at most once a second (it ran for
    every batch, halving schedule throughput until that slot fired)."""
    e = make_engine(slot_limit=20)
    far = 10 * 86_400_000  # days: beyond the 10 s window
    out = e.schedule([req(far + i) for i in range(30)])
    assert [o.error for o in out] == [None] * 30
    e.pump()  # linked: one roll slot now holds 30 > 20
    passes = {"n": 0}
    real = e.inspect().wheel.max_num_all

    def counted() -> int:
        passes["n"] += 1
        return real()

    monkeypatch.setattr(e.inspect().wheel, "max_num_all", counted)
    for _ in range(10):
        assert [o.error for o in e.schedule([req(far + 5), req(far + 6)])] == [None, None]
        assert e.schedule([req(300)])[0].error is None  # an ordinary slot still takes it
        clock.advance(50)
    assert passes["n"] == 1, "one pass of the wheel in 500 ms"
    clock.advance(1000)
    e.schedule([req(300)])
    assert passes["n"] == 2
    out = e.schedule([req(600) for _ in range(25)])  # an ordinary slot's limit holds
    assert sum(isinstance(o.error, Congested) for o in out) == 5


def test_a_failed_enqueue_write_is_retried_without_duplicates(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    e = make_engine()
    ids(e.schedule([req(100 + i) for i in range(50)]))
    calls = {"n": 0}
    real = TimerLog.append

    def flaky(self: TimerLog, data: bytes, now_ms: int) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(28, "No space left on device")
        return real(self, data, now_ms)

    monkeypatch.setattr(TimerLog, "append", flaky)
    with pytest.raises(OSError):
        e.pump()
    e.pump()
    slot = (clock.now_ms() + 100) // 100
    assert e.inspect().wheel.num(slot) + e.inspect().wheel.num(slot + 1) == 50, (
        "each message linked once"
    )
    run_until(e, clock, clock.now_ms() + 200)
    assert len(drain(e)) == 50


def test_receive_ack_redelivery_and_nack(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    ids(e.schedule([req(10, b"a"), req(10, b"b"), req(10, b"c")]))
    run_until(e, clock, clock.now_ms() + 20)
    first = e.receive("t", "g", max_messages=10, invisible_ms=1000)
    assert [m.body for m in first] == [b"a", b"b", b"c"]
    assert e.receive("t", "g") == []
    assert [m.body for m in e.receive("t", "other")] == [b"a", b"b", b"c"], "groups are independent"
    assert e.ack("t", "g", [first[0].receipt]) == [AckOutcome.ACKED]
    assert e.change_invisibility("t", "g", [first[1].receipt], 0) == [AckOutcome.ACKED]
    again = e.receive("t", "g", invisible_ms=1000)
    assert [(m.body, m.attempt) for m in again] == [(b"b", 2)]
    clock.advance(1001)
    later = e.receive("t", "g")
    assert sorted((m.body, m.attempt) for m in later) == [(b"b", 3), (b"c", 2)]
    assert e.ack("t", "g", [first[2].receipt]) == [AckOutcome.STALE]
    out = e.ack("t", "g", [m.receipt for m in later] + ["garbage"])
    assert out[:2] == [AckOutcome.ACKED, AckOutcome.ACKED]
    assert isinstance(out[2], InvalidArgument)
    assert e.stats("t")[0].groups == {"g": 0, "other": 3}


def test_a_receipt_of_another_shard_acks_nothing_here(make_engine: Make, clock: FakeClock) -> None:
    """The same topic id, offset and attempt handed out by another shard is not
    this shard's receipt: NOT_FOUND, and the message stays unacked."""
    from delayq.receipts import Receipt

    e = make_engine(shard=1)
    ids(e.schedule([req(10, b"m")]))
    run_until(e, clock, clock.now_ms() + 20)
    (got,) = e.receive("t", "g", max_messages=1, invisible_ms=1000)
    mine = Receipt.parse(got.receipt)
    assert mine.shard == 1
    foreign = str(mine._replace(shard=2))
    assert foreign != got.receipt
    assert e.ack("t", "g", [foreign]) == [AckOutcome.NOT_FOUND]
    assert e.ack("t", "g", [got.receipt]) == [AckOutcome.ACKED]


def test_one_ack_call_answers_every_kind_of_receipt_by_its_index(
    make_engine: Make, clock: FakeClock
) -> None:
    """A batch of receipts: good ones, a repeat, a malformed one, another topic's,
    a stale attempt. Each gets its own answer in place, and only the good ones are
    logged: after a kill the acked do not come back and the rest do."""
    e = make_engine()
    ids(e.schedule([req(10, str(i).encode()) for i in range(4)] + [req(10, b"u", topic="u")]))
    run_until(e, clock, clock.now_ms() + 20)
    got = e.receive("t", "g", max_messages=10, invisible_ms=1000)
    other = e.receive("u", "g", max_messages=10, invisible_ms=1000)
    clock.advance(1001)
    again = e.receive("t", "g", max_messages=1, invisible_ms=1000)  # "0", attempt 2
    assert [(m.body, m.attempt) for m in again] == [(b"0", 2)]
    receipts = [got[1].receipt, "nope", other[0].receipt, got[1].receipt, got[0].receipt]
    out = e.ack("t", "g", [*receipts, got[2].receipt])
    assert out[0] is AckOutcome.ACKED
    assert isinstance(out[1], InvalidArgument) and out[1].field == "receipts[1]"
    assert out[2:] == [
        AckOutcome.NOT_FOUND,  # a receipt of topic "u" given for "t"
        AckOutcome.ALREADY_ACKED,  # the repeat within the call
        AckOutcome.STALE,  # "0" was handed out again since
        AckOutcome.ACKED,
    ]
    e.abandon()
    e2 = make_engine()
    run_until(e2, clock, clock.now_ms() + 2000)
    assert sorted(m.body for m in drain(e2)) == [b"0", b"3"]
    assert [m.body for m in drain(e2, topic="u")] == [b"u"]


def test_auto_ack_hands_out_once_and_survives_a_kill(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    sent = ids(e.schedule([req(10, str(i).encode()) for i in range(6)]))
    run_until(e, clock, clock.now_ms() + 20)
    held = e.receive("t", "g", max_messages=2, invisible_ms=1000)  # at-least-once, unacked
    auto = e.receive("t", "g", max_messages=3, auto_ack=True)
    assert [m.body for m in auto] == [b"2", b"3", b"4"]
    assert all(m.receipt == "" for m in auto), "nothing to ack"
    clock.advance(1001)  # the unacked two expire: auto-ack takes redeliveries first
    again = e.receive("t", "g", max_messages=10, auto_ack=True)
    assert sorted(m.body for m in again) == [b"0", b"1", b"5"]
    assert e.ack("t", "g", [held[0].receipt]) == [AckOutcome.ALREADY_ACKED]
    assert e.stats("t")[0].groups == {"g": 0}
    e.abandon()  # like SIGKILL: the ACK records are all the next engine has
    e2 = make_engine()
    run_until(e2, clock, clock.now_ms() + 2000)
    assert e2.receive("t", "g", max_messages=10, auto_ack=True) == []
    assert [m.id for m in drain(e2, group="other")] == sent


def test_receive_validates_its_arguments(make_engine: Make) -> None:
    e = make_engine()
    for kwargs, field in [
        ({"max_messages": 0}, "max_messages"),
        ({"invisible_ms": 0}, "invisible_ms"),
        ({"wait_ms": -1}, "wait_ms"),
    ]:
        with pytest.raises(InvalidArgument) as err:
            e.receive("t", "g", **kwargs)  # type: ignore[arg-type]
        assert err.value.field == field
    with pytest.raises(InvalidArgument, match="group"):
        e.receive("t", "bad group")
    assert e.receive("never-used", "g") == []


def test_everything_survives_a_clean_restart(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine()
    _a, _b, c, far = ids(e.schedule([req(50, b"a"), req(50, b"b"), req(5000, b"c"), req(30_000)]))
    run_until(e, clock, clock.now_ms() + 60)
    got = e.receive("t", "g", max_messages=10)
    e.ack("t", "g", [got[0].receipt])
    e.cancel([c])
    e.close()
    with pytest.raises(EngineClosed):
        e.schedule([req(1)])
    e2 = make_engine()
    assert e2.recovery["checkpoint"] is True
    assert e2.recovery["commitlog_replayed"] == 0, "a clean close leaves nothing to replay"
    assert [m.body for m in drain(e2)] == [b"b"], "unacked comes back, acked does not"
    assert e2.lookup(c).state is MessageState.CANCELLED
    run_until(e2, clock, clock.now_ms() + 31_000, step_ms=100)
    assert [m.id for m in drain(e2)] == [far]
    assert e2.stats("t")[0].pending == 0


def test_abandoned_engine_recovers_from_the_tail_without_a_checkpoint(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    sent = ids(e.schedule([req(100 * i, str(i).encode()) for i in range(1, 40)]))
    e.cancel(sent[:5])
    run_until(e, clock, clock.now_ms() + 1000)
    before = drain(e)
    e.abandon()  # like SIGKILL: no checkpoint was ever written
    e2 = make_engine()
    assert e2.recovery["checkpoint"] is False
    # the logs' warm tails (zeros ahead of the writers) were cut, and are not data
    assert (e2.recovery["commitlog_bytes_cut"], e2.recovery["timerlog_bytes_cut"]) == (0, 0)
    run_until(e2, clock, clock.now_ms() + 5000)
    after = drain(e2)
    assert {m.id for m in before} | {m.id for m in after} == set(sent[5:])
    assert not {m.id for m in after} & set(sent[:5])


def test_an_engine_makes_the_files_its_first_writes_need_when_it_opens(
    make_engine: Make, clock: FakeClock
) -> None:
    """Creating a log file or a state chunk fsyncs it and its directory (tens of ms):
    done at open, not by the first schedule or link under the engine's lock. Files
    made by an open that then saw no write are opened again like any others."""

    def files(e: Engine) -> list[str]:
        d = e.settings.data_dir
        return sorted(
            f"{sub}/{p.name}"
            for sub in ("commitlog", "timerlog", "state")
            for p in (d / sub).iterdir()
        )

    e = make_engine()
    opened = files(e)
    assert [f.split("/")[0] for f in opened] == ["commitlog", "state", "timerlog"]
    e.abandon()  # killed before any write: the new files keep their warm tails
    e = make_engine()
    assert files(e) == opened
    sent = ids(e.schedule([req(100, str(i).encode()) for i in range(20)]))
    e.pump()  # links them: TimerLog records, wheel slots, the state map
    assert files(e) == opened, "the first writes found their files made"
    e.abandon()
    e2 = make_engine()
    run_until(e2, clock, clock.now_ms() + 300)
    assert sorted(m.id for m in drain(e2)) == sorted(sent)


def test_a_power_loss_that_kept_the_wheel_but_lost_the_timerlog_tail_loses_nothing(
    make_engine: Make, clock: FakeClock
) -> None:
    """After a power loss the mapped wheel may have reached the disk pointing at
    TimerLog records that did not: such slots are rebuilt from the TimerLog, and
    the messages whose records were lost are linked again from the CommitLog."""
    e = make_engine()
    first = ids(e.schedule([req(700, b"a%d" % i) for i in range(10)]))
    e.pump()
    ckpt = e.checkpoint()  # the TimerLog is synced up to here
    later = ids(e.schedule([req(700, b"b%d" % i) for i in range(10)] + [req(900, b"c")]))
    e.pump()  # linked: the slots now point past the checkpoint's TimerLog end
    e.abandon()
    # lose the TimerLog after the checkpoint (the CommitLog and the wheel survive)
    segments = sorted((e.settings.data_dir / "timerlog").glob("*.seg"))
    last = max(s for s in segments if int(s.stem) <= ckpt.timerlog_end)
    assert last.stat().st_size > ckpt.timerlog_end - int(last.stem), "nothing to lose"
    with open(last, "r+b") as f:
        f.truncate(ckpt.timerlog_end - int(last.stem))
    e2 = make_engine()
    assert e2.recovery["slots_rebuilt"] >= 1
    run_until(e2, clock, clock.now_ms() + 2000)
    got = [m.id for m in drain(e2)]
    assert sorted(got) == sorted(first + later), "each message once"
    assert e2.counters["quarantined"] == 0, "no chain led into the lost records"


def test_a_data_dir_of_another_shard_is_refused_and_the_epoch_never_goes_back(
    make_engine: Make, tmp_path: Path
) -> None:
    """The data directory records its epochs (epoch -> first CommitLog position):
    a node reopened with a lower ``settings.epoch`` stays in the recorded one, a
    lower epoch is refused at run time, and a higher one starts at the log's end,
    on disk before anything is written in it."""
    from delayq.ids import MessageId
    from delayq.store.epochfile import EPOCHS_FILE, load_epochs

    e = make_engine(epoch=3)
    (first,) = ids(e.schedule([req(100)]))
    start3 = e.epochs.entries[0][1]
    assert e.epochs.entries == ((3, start3),) and MessageId.parse(first).epoch == 3
    e.close()
    with pytest.raises(FailedPrecondition, match="holds shard 0; this engine is shard 1"):
        make_engine(shard=1, epoch=3)
    e = make_engine(epoch=2)  # a restart with an older setting keeps the recorded epoch
    assert e.epoch == 3
    (again,) = ids(e.schedule([req(100)]))
    assert MessageId.parse(again).epoch == 3
    with pytest.raises(FailedPrecondition, match="epoch 2 is below the shard's current epoch 3"):
        e.begin_epoch(2)
    end = e.commitlog_end
    e.begin_epoch(4)  # a failover raises the epoch
    assert load_epochs(tmp_path / "data" / EPOCHS_FILE).entries == ((3, start3), (4, end))
    (later,) = ids(e.schedule([req(100)]))
    assert MessageId.parse(later).epoch == 4 and MessageId.parse(later).position >= end
    assert e.lookup(first).state is MessageState.PENDING  # old ids still resolve
    e.close()
    assert make_engine().epoch == 4


def test_a_kill_loses_the_ready_queue_tail_and_recovery_rebuilds_it(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    sent = ids(e.schedule([req(100, str(i).encode()) for i in range(20)]))
    run_until(e, clock, clock.now_ms() + 300)
    assert e.stats("t")[0].delivered == 20
    e.abandon()  # like SIGKILL: the ready entries were only in memory
    sizes = [f.stat().st_size for f in (e.settings.data_dir / "ready").glob("*.idx")]
    assert sizes == [32], "the file holds its header only"
    e2 = make_engine()
    assert sorted(m.id for m in drain(e2)) == sorted(sent), "rebuilt from DELIVER records"


def test_pump_lets_other_threads_in_while_a_fired_slot_is_read(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan reads a fired slot's chain with the lock let go, under pump too: a
    receive or schedule on another thread is not held up for the whole walk."""
    e = make_engine()
    lock = e.inspect().lock
    took: list[bool] = []
    read = Scanner.fired_rows

    def meanwhile(self: Scanner, *args: Any) -> Any:
        def other() -> None:
            if lock.acquire(timeout=2):
                lock.release()
                took.append(True)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        return read(self, *args)

    monkeypatch.setattr(Scanner, "fired_rows", meanwhile)
    sent = ids(e.schedule([req(500, str(i).encode()) for i in range(10)]))
    run_until(e, clock, clock.now_ms() + 1000)
    assert took == [True], "another thread took the lock while the chain was read"
    assert sorted(m.id for m in drain(e)) == sorted(sent)


def test_a_release_that_fails_after_its_deliver_records_loses_nothing(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Indexing a released batch fails after its DELIVER records were written: the
    batch goes back to the release buffer, the retry delivers it, and it is still
    there after a restart."""
    e = make_engine()
    sent = ids(e.schedule([req(100, str(i).encode()) for i in range(20)]))
    e.pump()

    def broken(self: ReadyIndex, entries: Any) -> int:
        raise MemoryError("indexing failed")

    monkeypatch.setattr(ReadyIndex, "append_many", broken)
    clock.advance(200)
    with pytest.raises(MemoryError):
        e.pump()
    assert e.counters["delivered"] == 0
    monkeypatch.undo()
    e.pump()  # the retry
    assert e.counters["delivered"] == 20
    got = [m.id for m in e.receive("t", "g", max_messages=100)]
    assert sorted(got) == sorted(sent), "each message received, once here"
    e.close()
    e2 = make_engine()
    run_until(e2, clock, clock.now_ms() + 200)
    assert sorted(m.id for m in drain(e2, group="late")) == sorted(sent), "nothing lost"


def test_a_checkpoint_while_a_fired_slot_is_read_resumes_the_scan_at_that_slot(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (found by the SIGKILL test): the scan reads a fired slot's chain
    with the lock let go; a checkpoint taken then recorded a resume point past the
    slot, and a kill before release lost the slot's messages for good."""
    e = make_engine()
    sent = ids(e.schedule([req(500, str(i).encode()) for i in range(30)]))
    e.pump()  # linked into their slot

    class Killed(Exception):
        pass

    def read_then_die(*args: object) -> object:
        e.checkpoint()  # the flush thread's turn, while the chain is being read
        raise Killed  # SIGKILL before the chain reached the release buffer

    monkeypatch.setattr(Scanner, "fired_rows", read_then_die)
    clock.advance(500)
    with pytest.raises(Killed):
        e.pump()
    e.abandon()
    monkeypatch.undo()  # the next process reads chains as usual
    e2 = make_engine()
    run_until(e2, clock, clock.now_ms() + 200)
    assert sorted(m.id for m in drain(e2)) == sorted(sent)


def test_two_engines_cannot_share_a_data_dir(make_engine: Make) -> None:
    make_engine()
    with pytest.raises(FailedPrecondition, match="in use"):
        make_engine()


def test_a_data_dir_that_cannot_be_made_is_a_failed_precondition(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    for where in (tmp_path / "file", tmp_path / "file" / "below"):
        with pytest.raises(FailedPrecondition, match="cannot be used"):
            Engine(small_settings(where), background=False).start()


@pytest.fixture
def walked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fired slots are read from their TimerLog chains, as after a restart: damage
    written to the files while the engine runs would otherwise not be seen, the
    slots' near rows (kept in memory) serving them."""
    monkeypatch.setattr(link, "NEAR_SLOTS", 0)


def test_unreadable_records_are_quarantined_not_retried(
    make_engine: Make, clock: FakeClock, walked: None
) -> None:
    e = make_engine()
    ids(e.schedule([req(300, b"early")]))
    e.pump()
    ids(e.schedule([req(700, b"victim"), req(700, b"victim2")]))
    e.pump()
    ids(e.schedule([req(900, b"fine")]))
    e.pump()
    # corrupt the TimerLog record of the second batch's head (chain of slot +7)
    tl_dir = e.settings.data_dir / "timerlog"
    seg = sorted(tl_dir.iterdir())[-1]
    with open(seg, "r+b") as fh:
        fh.seek(32 + 64 * 2 + 20)
        fh.write(b"\xff\xff")
    run_until(e, clock, clock.now_ms() + 1000)
    assert sorted(m.body for m in drain(e)) == [b"early", b"fine"]
    assert e.counters["quarantined"] == 1
    lines = (e.settings.data_dir / "quarantine.log").read_text().splitlines()
    assert json.loads(lines[0])["file"] == "timerlog"
    run_until(e, clock, clock.now_ms() + 1000)
    assert e.counters["quarantined"] == 1, "reported once, not retried forever"


def _three_linked_batches(e: Engine) -> dict[bytes, int]:
    """Three link batches, each with five messages for slot +7 and three for slot
    +15 (interleaved in the request): each slot's chain runs through a contiguous
    run per batch. Returns each body's TimerLog position."""
    for batch in range(3):
        reqs = [
            req(700 if i % 2 else 1500, f"{'ab'[i % 2]}{batch}-{i}".encode()) for i in range(10)
        ]
        ids(e.schedule(reqs[1::2] + reqs[::2][:3]))
        e.pump()
    return _timer_positions(e)


def _timer_positions(e: Engine) -> dict[bytes, int]:
    """Each message body's TimerLog record position."""
    look = e.inspect()
    cl, tl = look.commitlog, look.timerlog
    return {cl.read(r.cl_pos)[0].body: pos for pos, r in tl.scan(0)}  # type: ignore[union-attr]


def _overwrite_timerlog(e: Engine, pos: int, data: bytes) -> None:
    seg = e.inspect().timerlog.log.segment_at(pos)
    assert seg is not None
    with open(e.settings.data_dir / "timerlog" / f"{seg.base:020d}.seg", "r+b") as fh:
        fh.seek(pos - seg.base)
        fh.write(data)


def test_a_slot_chain_is_walked_run_by_run_up_to_a_damaged_record(
    make_engine: Make, clock: FakeClock, walked: None
) -> None:
    e = make_engine()
    where = _three_linked_batches(e)
    victim = where[b"b1-5"]  # the middle of batch 1's run in slot +7's chain
    _overwrite_timerlog(e, victim + 20, b"\xff")
    run_until(e, clock, clock.now_ms() + 2000)
    got = sorted(m.body for m in drain(e))
    # newest first: batch 2's run whole, batch 1's down to the damaged record
    assert [b for b in got if b.startswith(b"b")] == sorted(
        [f"b2-{i}".encode() for i in (1, 3, 5, 7, 9)] + [b"b1-7", b"b1-9"]
    )
    assert len([b for b in got if b.startswith(b"a")]) == 9, "the other slot is untouched"
    assert e.counters["quarantined"] == 1
    entry = json.loads((e.settings.data_dir / "quarantine.log").read_text())
    assert entry["position"] == victim
    assert entry["error"].endswith("checksum, magic or slot mismatch; 8 unreachable")


def test_a_long_chain_is_read_in_growing_blocks_up_to_a_damaged_record(
    make_engine: Make, clock: FakeClock, walked: None
) -> None:
    """Runs longer than the first read (512 records) cross block boundaries."""
    e = make_engine(timerlog_segment_bytes=1 << 20)
    for batch in range(3):
        ids(e.schedule([req(700, b"%d-%d" % (batch, i)) for i in range(1200)]))
        e.pump()
    where = _timer_positions(e)
    _overwrite_timerlog(e, where[b"1-600"] + 20, b"\xff")
    run_until(e, clock, clock.now_ms() + 1000)
    got = {m.body for m in drain(e)}
    assert got == {b"2-%d" % i for i in range(1200)} | {b"1-%d" % i for i in range(601, 1200)}
    entry = json.loads((e.settings.data_dir / "quarantine.log").read_text())
    assert entry["error"].endswith("1801 unreachable")


def test_a_chain_walk_naps_while_release_is_due_or_its_slice_is_up_and_reads_the_same(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk holds the GIL; it naps between blocks while a release stage is past
    its wake-up time, and after each WALK_SLICE_S it held (the event loop waits for
    the GIL too); the chain read is the same either way."""
    e = make_engine(timerlog_segment_bytes=1 << 20)
    for batch in range(3):  # three runs of 300: read in two blocks (512, then 1024)
        ids(e.schedule([req(700, b"%d-%d" % (batch, i)) for i in range(300)]))
        e.pump()
    slot = (clock.now_ms() + 700) // e.settings.precision_ms
    entry = e.inspect().wheel.get(slot)
    assert entry is not None and entry.num == 900
    naps: list[float] = []
    monkeypatch.setattr(chainwalk.time, "sleep", naps.append)
    monkeypatch.setattr(chainwalk, "WALK_SLICE_S", 60.0)  # first: release alone

    def walk(wake_ms: int | None) -> list[int]:
        naps.clear()
        e.inspect().wakeups.release_wake_ms = wake_ms
        due, parked, problems = e.inspect().read_chain(slot, entry.last, entry.num)
        assert not len(parked) and not problems
        return sorted(due["seq"].tolist())

    idle = walk(None)
    assert naps == [], "release idle, slice not up: no nap"
    assert walk(clock.now_ms() + 50) == idle and naps == [], "release not due yet"
    assert walk(clock.now_ms()) == idle, "same records with naps"
    assert len(naps) == 2 and set(naps) == {chainwalk.WALK_NAP_S}
    monkeypatch.setattr(chainwalk, "WALK_SLICE_S", 0.0)
    assert walk(None) == idle, "same records with naps"
    assert len(naps) == 2, "the slice is up before every block: a nap before each"


def test_a_chain_link_that_does_not_point_back_ends_the_walk(
    make_engine: Make, clock: FakeClock, walked: None
) -> None:
    e = make_engine()
    where = _three_linked_batches(e)
    head = where[b"b2-9"]  # the newest record of slot +7: where its walk starts
    loop = (
        e.inspect().timerlog.read(head)._replace(prev=head)
    )  # well-formed, but pointing at itself
    _overwrite_timerlog(e, head, loop.encode())
    run_until(e, clock, clock.now_ms() + 2000)
    got = [m.body for m in drain(e)]
    assert b"b2-9" in got and not [b for b in got if b.startswith(b"b") and b != b"b2-9"]
    entry = json.loads((e.settings.data_dir / "quarantine.log").read_text())
    assert "link does not point back; 14 unreachable" in entry["error"]


def _count_walks(e: Engine, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the chain walks of the scan stage (each fired slot's count of records)."""
    walks: list[int] = []
    walk = Scanner.read_chain

    def counted(self: Scanner, slot: int, last: int, num: int) -> Any:
        walks.append(num)
        return walk(self, slot, last, num)

    monkeypatch.setattr(Scanner, "read_chain", counted)
    return walks


def test_slots_about_to_fire_are_released_from_their_near_rows_without_a_walk(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    e = make_engine()
    _three_linked_batches(e)  # 24 messages in two slots, well inside the near slots
    assert e.gauges()["near_rows"] == 24
    walks = _count_walks(e, monkeypatch)
    run_until(e, clock, clock.now_ms() + 2000)
    got = drain(e)
    assert walks == [], "no chain was read"
    assert len(got) == 24 and e.gauges()["near_rows"] == 0
    assert [m.deliver_at_ms for m in got] == sorted(m.deliver_at_ms for m in got)


@pytest.mark.parametrize("first", ["before a restart", "while the slot was far"])
def test_a_slot_whose_near_rows_are_not_its_whole_chain_is_walked(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    """Near rows are kept only in memory and only for slots about to fire: a slot
    linked partly before a restart, or first while it was far, is read from its
    chain, all of it."""
    far = first == "while the slot was far"
    e = make_engine()
    at = clock.now_ms() + (5_000 if far else 700)  # 50 slots ahead, or 7
    early = ids(e.schedule([req(at - clock.now_ms(), b"early-%d" % i) for i in range(5)]))
    e.pump()
    if far:
        assert e.gauges()["near_rows"] == 0
        run_until(e, clock, at - 1_000, step_ms=100)  # now 10 slots ahead
    else:
        e.close()
        e = make_engine()
    late = ids(e.schedule([req(at - clock.now_ms(), b"late-%d" % i) for i in range(3)]))
    e.pump()
    assert e.gauges()["near_rows"] == 3
    walks = _count_walks(e, monkeypatch)
    run_until(e, clock, at + 200)
    assert sorted(m.id for m in drain(e)) == sorted(early + late)
    assert walks == [8] and e.gauges()["near_rows"] == 0


def test_near_rows_stop_at_the_release_buffer_bound_and_the_rest_is_walked(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    e = make_engine(release_buffer_messages=10)
    sent = ids(e.schedule([req(300, b"a%d" % i) for i in range(8)]))
    e.pump()
    sent += ids(e.schedule([req(500, b"b%d" % i) for i in range(8)]))
    e.pump()
    assert e.gauges()["near_rows"] == 8, "the second batch would pass the bound"
    walks = _count_walks(e, monkeypatch)
    run_until(e, clock, clock.now_ms() + 1000)
    assert sorted(m.id for m in drain(e)) == sorted(sent)
    assert walks == [8], "the slot kept in memory is not walked, the other one is"


def test_a_near_slot_holding_a_parked_roll_is_walked_and_the_roll_goes_on(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a window shorter than the near slots, a message due past the window is
    parked in the window's last slot, which is near: that slot's messages are not
    kept in memory (its ROLL would be released as a plain message), the others are."""
    e = make_engine(window_ms=2_000)  # 20 slots: the last one is near
    start = clock.now_ms()
    (rolled,) = ids(e.schedule([req(5_000, b"rolled")]))
    ids(e.schedule([req(1_950, b"plain"), req(300, b"soon")]))
    e.pump()
    assert e.gauges()["near_rows"] == 1, "only the message of the slot without a ROLL"
    walks = _count_walks(e, monkeypatch)
    run_until(e, clock, start + 2_100)
    assert walks == [2], "the slot shared with the parked ROLL"
    got = drain(e)
    assert [m.body for m in got] == [b"soon", b"plain"] and e.counters["rolled"] == 1
    run_until(e, clock, start + 5_200)
    (late,) = drain(e)
    assert late.id == rolled and late.deliver_at_ms == start + 5_000


def test_retention_deletes_old_segments_but_keeps_live_messages(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine(
        commitlog_segment_bytes=8 << 10, timerlog_segment_bytes=2 << 10, retention_ms=5_000
    )
    (far,) = ids(e.schedule([req(60_000, b"far" * 50)]))
    for _ in range(30):
        ids(e.schedule([req(50, b"y" * 300) for _ in range(5)]))
        run_until(e, clock, clock.now_ms() + 1000, step_ms=100)
        drain(e)
        e.checkpoint()
    run_until(e, clock, clock.now_ms() + 35_000, step_ms=100)
    e.checkpoint()
    assert e.counters["commitlog_segments_deleted"] > 0
    assert e.counters["timerlog_segments_deleted"] > 0
    assert int(sorted(os.listdir(e.settings.data_dir / "timerlog"))[0].split(".")[0]) > 0
    got = drain(e)
    assert [m.id for m in got] == [far], "a rolled message outlives its first segment"
    oldest = sorted(os.listdir(e.settings.data_dir / "commitlog"))[0]
    assert int(oldest.split(".")[0]) > 0


def test_window_and_precision_are_fixed_for_a_data_dir(make_engine: Make, tmp_path: Path) -> None:
    make_engine().close()
    with pytest.raises(delayq.CorruptData, match="precision"):
        make_engine(precision_ms=50)


def _damage(data: Path, how: str) -> None:
    if how == "checkpoint":
        (data / "checkpoint.json").write_text("{not json")
    elif how == "renamed segment":
        seg = sorted((data / "timerlog").glob("*.seg"))[0]
        seg.rename(seg.with_name(f"{int(seg.stem) + 64:020d}.seg"))
    elif how == "short segment":
        with open(sorted((data / "commitlog").glob("*.seg"))[0], "r+b") as f:
            f.truncate(10)


@pytest.mark.parametrize(
    ("how", "says"),
    [
        ("checkpoint", "checkpoint unreadable"),
        ("renamed segment", "!= name"),
        ("short segment", "shorter than its header"),
        ("precision", "precision"),
    ],
)
def test_damaged_data_is_refused_and_the_refusal_leaves_nothing_open(
    make_engine: Make, how: str, says: str
) -> None:
    e = make_engine()
    e.schedule([req(100)])
    e.pump()
    e.close()
    data = e.settings.data_dir
    _damage(data, how)
    fds = set(os.listdir("/proc/self/fd"))
    with pytest.raises(delayq.CorruptData, match=says):
        make_engine(**({"precision_ms": 50} if how == "precision" else {}))
    assert set(os.listdir("/proc/self/fd")) == fds, "a refused open closed every file"
    with open(data / "LOCK", "rb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: raises if still held


def test_kill_between_commitlog_append_and_wheel_link_requeues_once(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    e.checkpoint()
    sent = ids(e.schedule([req(200 + i) for i in range(30)]))  # appended, not yet linked
    assert e.gauges()["enqueue_queue"] == 30
    e.abandon()
    e2 = make_engine()
    assert e2.recovery["requeued"] == 30
    run_until(e2, clock, clock.now_ms() + 300)
    assert sorted(m.id for m in drain(e2)) == sorted(sent)
    assert e2.gauges()["pending"] == 0


def test_sync_flush_shares_fsyncs_between_concurrent_callers(tmp_path: Path) -> None:
    import threading

    from delayq import EngineSettings, FlushPolicy

    settings = EngineSettings(data_dir=tmp_path / "d", flush=FlushPolicy.SYNC)
    with Engine(settings) as e:
        errors: list[BaseException] = []

        def producer() -> None:
            try:
                for _ in range(50):
                    assert e.schedule([req(60_000)])[0].error is None
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=producer) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        commit = e.group_commit
        assert commit.durable >= e.gauges()["commitlog_end"] - 1, "every ack waited for fsync"
        assert 0 < commit.fsyncs < 400, "400 synchronous schedules shared their fsyncs"


def test_an_unreadable_body_is_quarantined_once_and_others_still_arrive(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    good, bad = ids(e.schedule([req(10, b"good" * 10), req(10, b"bad!" * 10)]))
    run_until(e, clock, clock.now_ms() + 20)
    pos = MessageId.parse(bad).position
    seg = e.inspect().commitlog.log.segment_at(pos)
    assert seg is not None
    with open(e.settings.data_dir / "commitlog" / f"{seg.base:020d}.seg", "r+b") as fh:
        fh.seek(pos - seg.base + 80)  # inside the body
        fh.write(b"XX")
    got = e.receive("t", "g", max_messages=10, invisible_ms=1000)
    assert [m.id for m in got] == [good]
    assert e.counters["quarantined"] == 1
    clock.advance(2000)
    again = e.receive("t", "g", max_messages=10)
    assert [m.id for m in again] == [good], "the unreadable one was acked away, not retried"
    assert e.counters["quarantined"] == 1


def test_a_record_a_map_shows_torn_is_read_again_before_it_is_quarantined(
    make_engine: Make, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A receive's batch read through a segment's map that sees a whole record as
    torn (a stale map, say) reads it once more with pread: the message arrives,
    nothing is quarantined or acked away."""
    from delayq.store.commitlog import CommitLog

    e = make_engine()
    sent = ids(e.schedule([req(10, b"one" * 10), req(10, b"two" * 10)]))
    run_until(e, clock, clock.now_ms() + 20)
    real = CommitLog.read_messages

    def torn(self: CommitLog, positions: Any, *, payload: bool = True) -> Any:
        cols = real(self, positions, payload=payload)
        cols.ok[-1] = False  # as a map too short for the last record would show it
        return cols

    monkeypatch.setattr(CommitLog, "read_messages", torn)
    got = e.receive("t", "g", max_messages=10)
    assert sorted(m.id for m in got) == sorted(sent)
    assert {m.body for m in got} == {b"one" * 10, b"two" * 10}
    assert e.counters["quarantined"] == 0


def test_counters_and_closed_state_read_before_start(tmp_path: Path) -> None:
    """Metrics may scrape an engine that is still recovering: it says it is not
    running and counts nothing yet, without raising."""
    e = Engine(small_settings(tmp_path / "data"), FakeClock(START_MS), background=False)
    assert not e.running and dict(e.counters) == {}
    e.start()
    e.schedule([req(100)])
    assert e.counters["scheduled"] == 1
    e.close()


def test_an_epoch_whose_writes_the_log_lost_is_never_written_in_again(
    make_engine: Make, tmp_path: Path
) -> None:
    """The history says epoch 2 began at a position the CommitLog no longer
    reaches (its tail was lost): ids of epoch 2 may be out there, so the node
    writes in epoch 3 from the end that survived."""
    from delayq.epochs import EpochHistory
    from delayq.ids import MessageId
    from delayq.store.epochfile import EPOCHS_FILE, save_epochs

    e = make_engine()
    (kept,) = ids(e.schedule([req(100)]))
    end = e.commitlog_end
    e.close()
    path = tmp_path / "data" / EPOCHS_FILE
    save_epochs(path, EpochHistory.of([(1, 0), (2, end + 4096)]))
    e = make_engine()
    assert e.epoch == 3 and e.epochs.entries == ((1, 0), (3, end))
    (new,) = ids(e.schedule([req(100)]))
    assert MessageId.parse(new).epoch == 3
    assert e.lookup(kept).state is MessageState.PENDING
