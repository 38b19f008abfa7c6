"""Engine consumers on real files with a fake clock: receive (records of any size
whole), ack, redelivery and nack, receipts of another shard, one ack call for
every kind of receipt, auto-ack across a kill, and receive's argument checks."""

from __future__ import annotations

import os
import random

import pytest

from delayq import FakeClock, InvalidArgument
from delayq.engine import AckOutcome
from tests.support.engines import (
    Make,
    drain,
    ids,
    req,
    run_until,
)


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
