"""Receipts bound to their hand-out (engine, fake clock): a receipt acks or re-times
only the message it was handed out with, to the group it was handed to, on the
shard whose key made it. Another group's, a guessed or altered one, or one for
another message at that offset is INVALID_RECEIPT and changes nothing; receipts
keep working across a restart, and a replica that took its master's key takes
them once promoted."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from delayq import CorruptData, Engine, FailedPrecondition, FakeClock
from delayq.engine import AckOutcome
from delayq.receipts import Receipt
from delayq.store import receiptkey
from tests.replication.test_replica_engine import open_pair, replicate
from tests.support.engines import Make, drain, ids, req, run_until, small_settings

INVALID = AckOutcome.INVALID_RECEIPT


def delivered(e: Engine, clock: FakeClock, *bodies: bytes, topic: str = "t") -> list[str]:
    sent = ids(e.schedule([req(10, b, topic=topic) for b in bodies]))
    run_until(e, clock, clock.now_ms() + 20)
    return sent


def test_a_receipt_of_another_group_is_refused_and_acks_nothing(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    delivered(e, clock, b"a", b"b")
    got_a = e.receive("t", "A", max_messages=10, invisible_ms=1000)
    receipts_a = [m.receipt for m in got_a]
    assert e.ack("t", "B", receipts_a) == [INVALID, INVALID]
    assert e.change_invisibility("t", "B", receipts_a, 0) == [INVALID, INVALID]
    assert e.stats("t")[0].groups == {"A": 2}, "no group B made up, nothing acked"
    got_b = e.receive("t", "B", max_messages=10, invisible_ms=1000)
    assert [(m.body, m.attempt) for m in got_b] == [(b"a", 1), (b"b", 1)]
    assert e.ack("t", "A", [got_b[0].receipt]) == [INVALID], "and the other way round"
    assert e.ack("t", "A", receipts_a) == [AckOutcome.ACKED] * 2
    assert e.ack("t", "B", [m.receipt for m in got_b]) == [AckOutcome.ACKED] * 2
    assert e.stats("t")[0].groups == {"A": 0, "B": 0}


def test_a_guessed_or_altered_receipt_is_refused_and_the_message_still_comes(
    make_engine: Make, clock: FakeClock
) -> None:
    e = make_engine()
    delivered(e, clock, b"0", b"1", b"2")
    (first,) = e.receive("t", "g", max_messages=1, invisible_ms=1000)
    real = Receipt.parse(first.receipt)
    guesses = [
        real._replace(offset=real.offset + 1),  # the next offset, never handed out
        real._replace(offset=real.offset + 1, mac=0),
        real._replace(attempt=2),  # a later attempt than handed out
        real._replace(mac=real.mac ^ 1),  # the real one, altered
    ]
    texts = [str(g) for g in guesses]
    assert e.ack("t", "g", texts) == [INVALID] * 4
    assert e.change_invisibility("t", "g", texts, 0) == [INVALID] * 4
    beyond = str(real._replace(offset=99))  # no message there: nothing to check it by
    assert e.ack("t", "g", [beyond]) == [AckOutcome.NOT_FOUND]
    rest = e.receive("t", "g", max_messages=10, invisible_ms=1000)
    assert [(m.body, m.attempt) for m in rest] == [(b"1", 1), (b"2", 1)], "none skipped"
    assert e.ack("t", "g", [first.receipt]) == [AckOutcome.ACKED], "the real one still acks"
    # none of it was logged as an ack: after a kill the unacked two come back
    e.abandon()
    e2 = make_engine()
    run_until(e2, clock, clock.now_ms() + 2000)
    assert sorted(m.body for m in drain(e2)) == [b"1", b"2"]


def test_receipts_still_check_after_a_restart_and_a_kill(
    make_engine: Make, clock: FakeClock, tmp_path: Path
) -> None:
    e = make_engine()
    delivered(e, clock, b"a", b"b", b"c")
    got = e.receive("t", "g", max_messages=10, invisible_ms=60_000)
    key_file = tmp_path / "data" / receiptkey.RECEIPT_KEY_FILE
    key = key_file.read_bytes()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    e.close()
    e2 = make_engine()
    assert e2.ack("t", "g", [got[0].receipt]) == [AckOutcome.ACKED]
    e2.abandon()
    e3 = make_engine()
    assert e3.ack("t", "g", [got[1].receipt]) == [AckOutcome.ACKED]
    assert e3.ack("t", "other", [got[2].receipt]) == [INVALID]
    assert key_file.read_bytes() == key, "made once, at the first start"
    assert drain(e3) == [], "still in flight after a kill: its hand-out was logged"
    assert e3.ack("t", "g", [got[2].receipt]) == [AckOutcome.ACKED], "its receipt still acks"
    assert drain(e3) == []


def test_a_receipt_for_another_message_at_its_offset_is_refused(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Two nodes with one key whose ready queues differ at an offset (a log that
    diverged in a failover): the receipt names the message, so it checks only
    where the same message sits there."""
    one = Engine(small_settings(tmp_path / "one"), clock, background=False).start()
    key = one.replicating.receipt_key
    (tmp_path / "two").mkdir()
    receiptkey.save(tmp_path / "two" / receiptkey.RECEIPT_KEY_FILE, key, 0)
    two = Engine(small_settings(tmp_path / "two"), clock, background=False).start()
    three = Engine(small_settings(tmp_path / "three"), clock, background=False).start()
    try:
        assert two.replicating.receipt_key == key != three.replicating.receipt_key
        delivered(one, clock, b"x")
        two.cancel(ids(two.schedule([req(60_000, b"cancelled")])))  # seq 1 here
        delivered(two, clock, b"y")  # seq 2, at offset 0 of "t" as "x" is at one
        delivered(three, clock, b"x")
        (m,) = one.receive("t", "g", invisible_ms=1000)
        (n,) = two.receive("t", "g", invisible_ms=1000)
        assert Receipt.parse(m.receipt)[:4] == Receipt.parse(n.receipt)[:4]
        assert two.ack("t", "g", [m.receipt]) == [INVALID], "another message at offset 0"
        assert three.ack("t", "g", [m.receipt]) == [INVALID], "another key"
        assert one.ack("t", "g", [m.receipt]) == [AckOutcome.ACKED]
    finally:
        for e in (one, two, three):
            e.close()


def test_a_promoted_replica_takes_the_receipts_its_master_handed_out(
    tmp_path: Path, clock: FakeClock
) -> None:
    master, replica = open_pair(tmp_path, clock)
    try:
        with pytest.raises(FailedPrecondition, match="only a replica"):
            master.replicating.adopt_receipt_key(replica.replicating.receipt_key)
        replica.replicating.adopt_receipt_key(master.replicating.receipt_key)
        delivered(master, clock, b"a", b"b")
        got = master.receive("t", "g", max_messages=10, invisible_ms=60_000)
        replicate(master, replica)
        master.close()
        replica.close()  # the key it took is on disk: a restart keeps it
        again = Engine(small_settings(tmp_path / "r", replicated=True), clock, background=False)
        again.replicating.start_as_replica()
        again.start()
        again.replicating.promote(2)
        assert again.ack("t", "g", [m.receipt for m in got]) == [AckOutcome.ACKED] * 2
        assert again.receive("t", "g", max_messages=10) == []
        again.close()
    finally:
        for e in (master, replica):
            e.close()


def test_a_damaged_receipt_key_refuses_the_open(make_engine: Make, tmp_path: Path) -> None:
    make_engine().close()
    path = tmp_path / "data" / receiptkey.RECEIPT_KEY_FILE
    good = path.read_bytes()
    path.write_bytes(good[:40] + bytes([good[40] ^ 1]) + good[41:])
    with pytest.raises(CorruptData, match=r"receipt key .* CRC mismatch"):
        make_engine()
    path.write_bytes(good)  # restored: the directory opens again (the lock was let go)
    make_engine()
