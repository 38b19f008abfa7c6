"""``GroupState`` with a policy (in-flight limit, attempts, backoff on lapse and
nack) against the rules stated plainly, over random runs: attempts count up one
a hand-out, never past ``max_attempts``; a retry never comes before its lapse or
nack plus the backoff; never more than the limit in flight; new offsets in
order; and nothing lost: in the end every offset is acked or dead-lettered."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from delayq.delivery.groups import GroupState, attempt_of

OPS = st.lists(
    st.tuples(st.sampled_from(["take", "ack", "nack", "wait", "restore"]), st.integers(0, 50)),
    max_size=80,
)


def backoff(failed: int) -> int:
    return 7 * failed


@settings(max_examples=150, deadline=None)
@given(
    ops=OPS,
    limit=st.integers(1, 6),
    attempts=st.integers(0, 4),
    ready_len=st.integers(0, 25),
)
def test_a_group_with_a_policy_keeps_the_rules(
    ops: list[tuple[str, int]], limit: int, attempts: int, ready_len: int
) -> None:
    g = GroupState()
    now, inv = 0, 10
    handed: dict[int, tuple[int, int]] = {}  # offset -> (attempt, ticket) of its last hand-out
    earliest: dict[int, int] = {}  # offset -> when its next attempt may come, at the earliest
    new_seen = -1
    dead: set[int] = set()

    def take(n: int) -> None:
        nonlocal new_seen
        for off, attempt in g.take(now, ready_len, n, inv, limit, attempts, backoff):
            before = handed.get(off, (0, 0))[0]
            assert attempt == before + 1, "attempts count up one a hand-out"
            assert not attempts or attempt <= attempts
            assert now >= earliest.get(off, 0), "never before its lapse/nack + backoff"
            if before == 0:
                assert off > new_seen, "new offsets in order"
                new_seen = off
            handed[off] = (attempt, attempt)
            earliest[off] = now + inv + backoff(attempt)
        for off, ticket in g.take_dead():
            assert attempts and attempt_of(ticket) - 1 == attempts
            assert g.ack(off, ticket, ready_len).value == "acked"
            dead.add(off)
        assert g.flying() <= limit

    for op, arg in ops:
        if op == "take":
            take(1 + arg % 7)
        elif op == "wait":
            now += arg % 13
        elif handed and op in ("ack", "nack"):
            off = sorted(handed)[arg % len(handed)]
            ticket = handed[off][1]
            if op == "ack":
                g.ack(off, ticket, ready_len)
            elif isinstance(due := g.nack(off, ticket, now, backoff, attempts), int):
                last = attempts and handed[off][0] >= attempts
                assert due == now + (0 if last else backoff(handed[off][0]))
                earliest[off] = due
        elif op == "restore":  # a restart: what a checkpoint keeps
            waiting = g.waiting
            rows = [[o, t, d, int(o in waiting)] for o, (d, t) in g.inflight.items()]
            g = GroupState(g.committed, sorted(g.acked), rows)
    for _ in range(200):  # drain: everything comes back until acked or dead
        now += 1000
        got = g.take(now, ready_len, 100, inv, limit, attempts, backoff)
        for off, ticket in got:
            g.ack(off, ticket, ready_len)
        for off, ticket in g.take_dead():
            g.ack(off, ticket, ready_len)
            dead.add(off)
        if g.committed == ready_len:
            break
    assert g.committed == ready_len, "nothing lost"
    assert not g.inflight and not g.waiting
