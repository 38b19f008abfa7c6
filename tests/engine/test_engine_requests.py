"""Engine requests on real files with a fake clock: cancel (outcomes, batches,
ids that name nothing or a file header), reschedule, lookup, input refused per
item, and flow control (a full enqueue queue, a full slot, a roll slot over the
limit, a failed enqueue write retried)."""

from __future__ import annotations

import base64

import crc32c
import pytest

from delayq import Congested, FailedPrecondition, FakeClock, InvalidArgument, NotFound
from delayq.engine import CancelOutcome, MessageState, ScheduleRequest
from delayq.ids import MessageId
from delayq.store.timerlog import TimerLog
from tests.support.engines import (
    Make,
    drain,
    ids,
    req,
    run_until,
)


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
    past_end = str(MessageId(0, 1, e.observing.gauges()["commitlog_end"] + 10))
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
    end_before = e.observing.gauges()["commitlog_end"]
    with pytest.raises(Congested) as err:
        e.schedule([req(100) for _ in range(5)])
    assert err.value.retry_after_ms > 0
    assert e.observing.gauges()["commitlog_end"] == end_before, "a refused batch writes nothing"
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
