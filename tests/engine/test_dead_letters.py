"""Dead letters and new receipts, on real files with a fake clock: a message past
its group's last attempt goes to ``dlq.<group>`` (its copy durable before the
original is acked, across a restart), a client's ``dead_letter`` of a receipt,
``retime``'s new receipt refusing the old one, and a dead letter replayed."""

from __future__ import annotations

from delayq import FakeClock, InvalidArgument
from delayq.deadletters import dead_letter_topic, replayed
from delayq.engine import AckOutcome
from delayq.settings import AttemptLimits
from delayq.types import ScheduleRequest
from tests.support.engines import Make, ids, req, run_until


def test_past_its_last_attempt_a_message_goes_to_the_groups_dead_letter_topic(
    make_engine: Make, clock: FakeClock
) -> None:
    limits = AttemptLimits(2, (("patient", 0),))
    e = make_engine(delivery_attempts=limits)
    (mid,) = ids(e.schedule([req(10, b"poison", key="k", headers={"h": "v"})]))
    run_until(e, clock, clock.now_ms() + 20)
    for attempt in (1, 2):
        (got,) = e.receive("t", "g", invisible_ms=1000)
        assert (got.id, got.attempt) == (mid, attempt)
        assert [m.attempt for m in e.receive("t", "patient", invisible_ms=1000)] == [attempt]
        clock.advance(1001)
    assert e.receive("t", "g", invisible_ms=1000) == [], "no third attempt"
    assert [m.attempt for m in e.receive("t", "patient")] == [3], "no limit for this group"
    assert e.ack("t", "g", [got.receipt]) == [AckOutcome.ALREADY_ACKED]
    run_until(e, clock, clock.now_ms() + 20)
    (dead,) = e.receive(dead_letter_topic("g"), "ops")
    assert (dead.body, dead.key) == (b"poison", "k")
    assert dead.headers == {
        "h": "v",
        "dlq.topic": "t",
        "dlq.id": mid,
        "dlq.group": "g",
        "dlq.attempts": "2",
    }
    (stats,) = e.stats("t")
    assert stats.dead_lettered == {"g": 1} and stats.groups["g"] == 0
    assert e.observing.counters["dead_lettered"] == 1
    e.close()
    e = make_engine(delivery_attempts=limits)
    clock.advance(60_000)
    assert e.receive("t", "g") == [], "acked for the group, durably"
    assert [m.id for m in e.receive(dead_letter_topic("g"), "ops", invisible_ms=1000)] == [
        dead.id
    ], "the copy survives the restart (unacked by ops: handed out again)"


def test_a_client_sends_a_received_message_to_the_dead_letter_topic(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    ids(e.schedule([req(10, b"a"), req(10, b"b"), req(10, b"c")]))
    run_until(e, clock, clock.now_ms() + 20)
    a, b, c = e.receive("t", "g", invisible_ms=1000)
    assert e.change_invisibility("t", "g", [c.receipt], 0) == [AckOutcome.ACKED]
    (c2,) = e.receive("t", "g", invisible_ms=1000)
    out = e.dead_letter("t", "g", [a.receipt, "nope", c.receipt, b.receipt])
    assert out[0] is AckOutcome.ACKED and out[3] is AckOutcome.ACKED
    assert isinstance(out[1], InvalidArgument) and out[1].field == "receipts[1]"
    assert out[2] is AckOutcome.STALE, "c was handed out again since that receipt"
    assert e.dead_letter("t", "g", [a.receipt]) == [AckOutcome.ALREADY_ACKED]
    run_until(e, clock, clock.now_ms() + 20)
    dead = e.receive("dlq.g", "ops")
    assert sorted((m.body, m.headers["dlq.attempts"]) for m in dead) == [(b"a", "1"), (b"b", "1")]
    assert e.ack("t", "g", [c2.receipt]) == [AckOutcome.ACKED]


def test_retime_hands_out_a_new_receipt_and_the_old_one_acks_nothing(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    ids(e.schedule([req(10, b"a")]))
    run_until(e, clock, clock.now_ms() + 20)
    (got,) = e.receive("t", "g", invisible_ms=1000)
    (fresh,) = e.retime("t", "g", [got.receipt], 5000)
    assert isinstance(fresh, str) and fresh != got.receipt
    assert e.retime("t", "g", [got.receipt], 5000) == [AckOutcome.STALE]
    clock.advance(4999)
    assert e.receive("t", "g") == [], "invisible for the new 5 s"
    (again,) = e.retime("t", "g", [fresh], 0)
    assert isinstance(again, str)
    (back,) = e.receive("t", "g", invisible_ms=1000)
    assert back.attempt == 2, "a re-time is not an attempt; the redelivery is"
    assert e.ack("t", "g", [again]) == [AckOutcome.STALE]
    assert e.ack("t", "g", [back.receipt]) == [AckOutcome.ACKED]


def test_a_dead_letter_replays_to_its_topic_as_it_was(make_engine: Make, clock: FakeClock) -> None:
    e = make_engine(delivery_attempts=AttemptLimits(1))
    ids(e.schedule([req(10, b"x", key="k", headers={"h": "v"})]))
    run_until(e, clock, clock.now_ms() + 20)
    e.receive("t", "g", invisible_ms=1000)
    clock.advance(1001)
    assert e.receive("t", "g") == []
    run_until(e, clock, clock.now_ms() + 20)
    (dead,) = e.receive("dlq.g", "ops")
    topic, headers = replayed(dead.headers)
    ids(e.schedule([ScheduleRequest(topic=topic, body=dead.body, key=dead.key, headers=headers)]))
    assert e.ack("dlq.g", "ops", [dead.receipt]) == [AckOutcome.ACKED]
    run_until(e, clock, clock.now_ms() + 20)
    (back,) = e.receive("t", "g")
    assert (back.body, back.key, back.headers) == (b"x", "k", {"h": "v"})
