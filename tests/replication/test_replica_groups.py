"""A replica holds its master's group policies and every hand-out's attempt (POLICY
and HANDOUT records): promoted, it enforces the policy and a message's next
attempt continues the master's count, its receipts from the master still ack."""

from __future__ import annotations

from pathlib import Path

from delayq import FakeClock
from delayq.engine import AckOutcome, GroupPolicy, PushTarget
from tests.replication.test_replica_engine import open_pair, replicate
from tests.support.engines import START_MS, ids, req, run_until


def test_a_promoted_replica_has_the_policy_and_continues_the_attempts(tmp_path: Path) -> None:
    clock = FakeClock(START_MS)
    master, replica = open_pair(tmp_path, clock)
    replica.replicating.adopt_receipt_key(master.replicating.receipt_key)  # as ``follow`` does
    try:
        sent = ids(master.schedule([req(10, b"a"), req(10, b"b"), req(10, b"c")]))
        run_until(master, clock, clock.now_ms() + 20)
        policy = master.set_group_policy("t", "g", GroupPolicy(max_attempts=3))
        got = master.receive("t", "g", invisible_ms=1000, max_messages=2)
        assert [m.attempt for m in got] == [1, 1]
        clock.advance(1001)
        again = master.receive("t", "g", invisible_ms=1000, max_messages=1)
        assert [(m.id, m.attempt) for m in again] == [(sent[0], 2)]
        master.pause_group("t", "paused", True)
        replicate(master, replica)
        replica.pump()
        replica.replicating.promote(2)
        assert replica.group_policy("t", "g") == policy
        assert replica.group_policy("t", "paused").paused
        assert replica.ack("t", "g", [again[0].receipt]) == [AckOutcome.ACKED], "its receipt"
        assert replica.ack("t", "g", [got[0].receipt]) == [AckOutcome.ALREADY_ACKED]
        clock.advance(1001)
        later = replica.receive("t", "g", invisible_ms=1000, max_messages=10)
        assert sorted((m.body, m.attempt) for m in later) == [(b"b", 2), (b"c", 1)]
        clock.advance(1001)
        last = replica.receive("t", "g", invisible_ms=1000, max_messages=10)
        assert sorted((m.body, m.attempt) for m in last) == [(b"b", 3), (b"c", 2)]
        clock.advance(1001)
        assert [m.body for m in replica.receive("t", "g", max_messages=10)] == [b"c"], (
            "b had its 3 attempts (two on the old master): dead-lettered"
        )
        run_until(replica, clock, clock.now_ms() + 500, step_ms=50)
        (dead,) = replica.receive("dlq.g", "ops")
        assert (dead.body, dead.headers["dlq.attempts"]) == (b"b", "3")
    finally:
        master.close()
        replica.close()


def test_a_replica_holds_its_masters_push_groups(tmp_path: Path) -> None:
    clock = FakeClock(START_MS)
    master, replica = open_pair(tmp_path, clock)
    try:
        target = PushTarget(url="https://h.example/in", headers=(("x-k", "v"),), secret_ref="s")
        pushed = master.set_group_policy("t", "g", GroupPolicy(push=target))
        master.set_group_policy("t", "pull", GroupPolicy(max_attempts=2))
        replicate(master, replica)
        replica.pump()
        assert replica.push_groups() == [("t", "g", pushed)]
        master.set_group_policy("t", "g", GroupPolicy(max_attempts=2))  # made a pull group
        replicate(master, replica)
        replica.pump()
        assert replica.push_groups() == []
    finally:
        master.close()
        replica.close()
