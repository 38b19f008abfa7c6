"""Consumer-group state (``delivery/groups``): hand-out, invisibility, acks, commits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delayq.delivery import groups
from delayq.delivery.groups import TURN, GroupState, attempt_of
from delayq.delivery.types import ATTEMPT_BUCKETS, AckOutcome


def test_group_skip_to_forgets_expired_offsets_and_counts_the_unacked() -> None:
    g = GroupState()
    assert len(g.take(0, ready_len=10, max_n=6, invisible_ms=100, max_inflight=10)) == 6
    assert g.ack_many([0, 2], [1, 1], 10) == [AckOutcome.ACKED] * 2  # committed 1, 2 acked
    assert g.skip_to(4) == 2, "offsets 1 and 3 expired unacked; 0 and 2 were acked"
    assert (g.committed, g.acked, sorted(g.inflight)) == (4, set(), [4, 5])
    assert g.skip_to(3) == 0 and g.committed == 4, "a floor never moves a group back"
    assert g.ack(1, 1, 10) is AckOutcome.ALREADY_ACKED
    # only the offsets at or above the floor come back, then the new ones
    assert g.take(100, 10, 10, 100, 10) == [(4, 2), (5, 2), (6, 1), (7, 1), (8, 1), (9, 1)]
    assert g.skip_to(10) == 6 and (g.committed, g.next, g.inflight) == (10, 10, {})


def test_group_redelivers_after_invisibility_and_commits_in_order() -> None:
    g = GroupState()
    assert g.take(0, ready_len=3, max_n=10, invisible_ms=100, max_inflight=10) == [
        (0, 1),
        (1, 1),
        (2, 1),
    ]
    assert g.take(50, 3, 10, 100, 10) == []
    assert g.ack(1, 1, 3) is AckOutcome.ACKED
    assert g.committed == 0
    assert g.take(100, 3, 10, 100, 10) == [(0, 2), (2, 2)]
    assert g.ack(0, 1, 3) is AckOutcome.STALE
    assert g.ack(0, 2, 3) is AckOutcome.ACKED
    assert g.committed == 2
    assert g.ack(0, 2, 3) is AckOutcome.ALREADY_ACKED
    assert g.ack(9, 1, 3) is AckOutcome.NOT_FOUND
    assert g.change_invisibility(2, 2, 150, 0) is AckOutcome.ACKED
    assert g.take(150, 3, 10, 100, 10) == [(2, 3)]
    assert g.backlog(3) == 1
    assert g.redelivered == 3, "offsets 0 and 2 at 100, 2 again at 150"


def test_unhanded_counts_what_the_group_was_never_handed() -> None:
    g = GroupState(committed=2, acked=[4])  # after a restart: 4 acked out of order before
    assert g.unhanded(6) == 3, "2, 3 and 5; 4 is acked"
    g.take(0, ready_len=6, max_n=2, invisible_ms=100, max_inflight=10)
    assert (g.unhanded(6), len(g.inflight)) == (1, 2)
    assert g.unhanded(4) == 0


def _ack_one_by_one(
    committed: int, acked: set[int], held: dict[int, int], receipts: list[tuple[int, int]], n: int
) -> tuple[list[AckOutcome], int, set[int], set[int]]:
    """The ack rules stated plainly, one receipt at a time (the model for ack_many)."""
    out = []
    for off, attempt in receipts:
        if off >= n:
            out.append(AckOutcome.NOT_FOUND)
        elif off < committed or off in acked:
            out.append(AckOutcome.ALREADY_ACKED)
        elif off in held and held[off] != attempt:
            out.append(AckOutcome.STALE)
        else:
            held.pop(off, None)
            acked.add(off)
            while committed in acked:
                acked.discard(committed)
                committed += 1
            out.append(AckOutcome.ACKED)
    return out, committed, acked, set(held)


@pytest.mark.parametrize("seed", range(12))
def test_acking_a_batch_of_receipts_is_acking_them_one_by_one(seed: int) -> None:
    """Repeats in one call, stale attempts, offsets past the queue, acks of what was
    acked before: ack_many answers each as the one-at-a-time rules do, and leaves
    the same committed offset, acked set and in-flight set."""
    rng = np.random.default_rng(seed)
    n, g = 40, GroupState()
    now = 0
    for _ in range(6):
        for off, attempt in g.take(now, n, int(rng.integers(1, 15)), 10, 100):
            assert g.inflight[off][1] == attempt
        now += int(rng.integers(0, 25))  # some expire: handed out again, attempt + 1
        held = {off: attempt for off, (_, attempt) in g.inflight.items()}
        picks = rng.integers(0, n + 5, size=int(rng.integers(0, 20))).tolist()
        receipts = [(o, held.get(o, 1) + int(rng.integers(-1, 1))) for o in picks]
        want = _ack_one_by_one(g.committed, set(g.acked), dict(held), receipts, n)
        got = g.ack_many([o for o, _ in receipts], [a for _, a in receipts], n)
        assert (got, g.committed, g.acked, set(g.inflight)) == want
        assert g.next >= g.committed


def _take_one_by_one(
    g: GroupState, now_ms: int, ready_len: int, max_n: int, invisible_ms: int, max_inflight: int
) -> list[tuple[int, int]]:
    """``take``'s rule for new offsets stated plainly, one at a time (the model for
    its batch path), after the same redeliveries, in one expiry group."""
    deadline = now_ms + invisible_ms
    out, _ = g._expired(now_ms, max_n, deadline, 0, max_inflight - g.flying(), None)
    while len(out) < max_n and g.next < ready_len and len(g.inflight) < max_inflight:
        off = g.next
        g.next += 1
        if off not in g.acked:
            out.append((off, 1))
            g.inflight[off] = (deadline, 1)
    if out:
        g._push(deadline, out)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_taking_new_offsets_in_a_run_is_taking_them_one_by_one(seed: int) -> None:
    """With offsets acked out of order ahead of ``next``, redeliveries due, a full
    in-flight bound or a short queue, ``take`` hands out what the one-at-a-time
    rules do and leaves the same state."""
    rng = np.random.default_rng(seed)
    fast, slow = GroupState(), GroupState()
    now, n = 0, 0
    for _ in range(30):
        n += int(rng.integers(0, 20))
        args = (n, int(rng.integers(1, 12)), int(rng.integers(1, 30)), int(rng.integers(3, 40)))
        got = fast.take(now, *args)
        assert got == _take_one_by_one(slow, now, *args)
        for off in rng.choice(n + 3, size=int(rng.integers(0, 6))).tolist():  # ahead too
            assert fast.ack(off, 1, n) == slow.ack(off, 1, n)
        assert (fast.next, fast.committed, fast.acked, fast.inflight) == (
            slow.next,
            slow.committed,
            slow.acked,
            slow.inflight,
        )
        now += int(rng.integers(0, 20))


def test_group_give_back_undoes_an_auto_ack_and_redelivers_at_once() -> None:
    g = GroupState()
    offsets, attempts = g.take_acked(0, ready_len=10, max_n=4)  # the contiguous run
    assert (list(offsets), g.committed) == ([0, 1, 2, 3], 4)
    g.give_back(offsets, attempts, now_ms=5, handed=True)
    assert (g.committed, g.acked, g.backlog(10)) == (0, set(), 10)
    assert g.flying() == 0, "no consumer holds them"
    assert g.take(5, 10, 2, 100, 10, 1, lambda n: 60_000) == [(0, 1), (1, 1)], (
        "due again at once, in order, the same attempt: no retry, no backoff, not dead"
    )
    assert g.retries == [0] * len(ATTEMPT_BUCKETS) and g.redelivered == 0
    # the general path: an out-of-order ack that committed then moves over stays acked
    for handed, again in ((True, [(0, 2), (2, 2), (3, 1)]), (False, [(0, 3), (2, 3), (3, 2)])):
        h = GroupState()
        assert len(h.take(0, 10, 3, 100, 10)) == 3
        assert h.ack(1, 1, 10) is AckOutcome.ACKED
        offsets, attempts = h.take_acked(200, ready_len=10, max_n=3)  # 0 and 2 (expired), 3
        assert (list(offsets), attempts, h.committed) == ([0, 2, 3], [2, 2, 1], 4)
        h.give_back(offsets, attempts, now_ms=200, handed=handed)
        assert (h.committed, h.acked, h.backlog(10)) == (0, {1}, 9)
        assert h.take(200, 10, 10, 100, 10)[:3] == again, "an Ack call's: as lapsed"
        h.give_back([], [], 300)  # nothing taken: nothing changes
        assert (h.committed, h.acked) == (0, {1})


def test_group_respects_inflight_bound_and_restart_state() -> None:
    g = GroupState()
    assert len(g.take(0, 100, 100, 1000, max_inflight=5)) == 5
    restored = GroupState(committed=2, acked=[4])
    assert [o for o, _ in restored.take(0, 6, 10, 100, 10)] == [2, 3, 5]


def test_take_acked_is_at_most_once_and_keeps_the_invariants() -> None:
    g = GroupState()
    assert g.take_acked(0, ready_len=5, max_n=3) == (range(3), [1, 1, 1])
    assert (g.committed, g.next, g.backlog(5)) == (3, 3, 2)
    held = g.take(0, ready_len=5, max_n=1, invisible_ms=10, max_inflight=100)  # offset 3
    assert g.take_acked(5, ready_len=5, max_n=10) == ([4], [1])
    assert g.committed == 3 and g.acked == {4}
    assert g.take_acked(20, ready_len=5, max_n=10) == ([3], [2]), "expired redelivery first"
    assert (g.committed, g.acked, g.inflight, g.backlog(5)) == (5, set(), {}, 0)
    assert g.ack(held[0][0], held[0][1], 5) is AckOutcome.ALREADY_ACKED
    offsets, attempts = g.take_acked(30, ready_len=5, max_n=10)
    assert (list(offsets), attempts) == ([], [])


def test_a_message_past_its_last_attempt_is_held_for_the_dead_letter_topic() -> None:
    g = GroupState()
    assert g.take(0, ready_len=2, max_n=10, invisible_ms=100, max_inflight=10, max_attempts=2) == [
        (0, 1),
        (1, 1),
    ]
    assert g.ack(1, 1, 2) is AckOutcome.ACKED
    assert g.take(100, 2, 10, 100, 10, max_attempts=2) == [(0, 2)]
    assert g.take_dead() == []
    # attempt 2 of 2 lapses: not handed out again but held, under a ticket of attempt 3
    assert g.take(200, 2, 10, 100, 10, max_attempts=2) == []
    assert g.take_dead() == [(0, 3)] and g.take_dead() == [], "taken once"
    assert g.ack(0, 2, 2) is AckOutcome.STALE, "the last receipt acks nothing any more"
    assert g.backlog(2) == 1, "held, not acked: until the copy is made"
    # the copy failed: it is held until the deadline, then queued again
    assert g.take(300, 2, 10, 100, 10, max_attempts=2) == []
    assert g.take_dead() == [(0, 4)]
    assert g.ack(0, 4, 2) is AckOutcome.ACKED and g.committed == 2


def test_no_limit_and_a_queued_dead_letter_acked_meanwhile() -> None:
    g = GroupState()
    g.take(0, 1, 10, 10, 10)
    for now in range(10, 100, 10):
        assert g.take(now, 1, 10, 10, 10, max_attempts=0) == [(0, now // 10 + 1)]
    assert g.take_dead() == []
    h = GroupState()
    h.take(0, 1, 10, 10, 10, max_attempts=1)
    assert h.take(10, 1, 10, 10, 10, max_attempts=1) == []
    assert h.ack(0, 2, 1) is AckOutcome.ACKED  # (acked by the ticket it is held under)
    assert h.take_dead() == [], "what was acked since it was queued is dropped"


def test_hold_rotates_the_ticket_and_keeps_the_attempt() -> None:
    g = GroupState()
    g.take(0, 1, 10, 100, 10)
    ticket = g.hold(0, 1, until_ms=500)
    assert ticket == 1 + TURN and attempt_of(ticket) == 1
    assert g.hold(0, 1, 600) is AckOutcome.STALE, "the old ticket holds nothing"
    assert g.ack(0, 1, 1) is AckOutcome.STALE
    assert g.take(499, 1, 10, 100, 10) == [], "held until 500"
    assert g.take(500, 1, 10, 100, 10) == [(0, 2)], "then attempt 2, a fresh ticket"
    assert g.hold(5, 1, 600) is AckOutcome.NOT_FOUND
    assert g.ack(0, 2, 1) is AckOutcome.ACKED
    assert g.hold(0, 2, 600) is AckOutcome.ALREADY_ACKED


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_the_batch_ack_pass_answers_and_leaves_what_the_one_by_one_loop_does(
    data: st.DataObject,
) -> None:
    """Two groups fed the same takes, acks (runs, shuffles, repeats, stale and unknown
    receipts) and expiries: one acks batches by ``_ack_held`` where it applies, the
    other only one by one; every answer and the state after each step agree."""
    fast, slow = GroupState(), GroupState()
    now, ready = 0, 0
    handed: list[tuple[int, int]] = []
    for _ in range(data.draw(st.integers(1, 12), label="steps")):
        ready += data.draw(st.integers(0, 40))
        now += data.draw(st.sampled_from([0, 10, 200]))
        n = data.draw(st.integers(0, 30))
        took = fast.take(now, ready, n, 100, 1000)
        assert took == slow.take(now, ready, n, 100, 1000)
        handed += took
        if not handed:
            continue
        held = [(o, t) for o, (_, t) in sorted(fast.inflight.items())]
        pool = held if held and data.draw(st.booleans()) else handed
        picks = data.draw(st.lists(st.sampled_from(pool), max_size=30))
        if data.draw(st.booleans()):
            picks = sorted(set(picks))  # the usual ack: one batch's receipts in order
        offsets, attempts = [o for o, _ in picks], [a for _, a in picks]
        if data.draw(st.booleans()):  # some stale, unknown or past the end
            offsets = [o + data.draw(st.sampled_from([0, 0, 0, 1000])) for o in offsets]
            attempts = [a + data.draw(st.sampled_from([0, 0, 0, 1])) for a in attempts]
        got = fast.ack_many(offsets, attempts, ready)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(groups, "_RUN", 1 << 62)  # the loop only
            want = slow.ack_many(offsets, attempts, ready)
        assert got == want
        assert (fast.committed, fast.next, fast.acked, fast.inflight) == (
            slow.committed,
            slow.next,
            slow.acked,
            slow.inflight,
        )


def test_a_receipt_whose_attempt_failed_is_stale_for_all_but_an_ack() -> None:
    g = GroupState()
    assert g.take(0, 2, 1, 100, max_inflight=1) == [(0, 1)]
    assert g.nack(0, 1, 0, lambda n: 1000) == 1000
    assert g.nack(0, 1, 5, lambda n: 1000) is AckOutcome.STALE, "its failure counted once"
    assert g.retries[0] == 1
    assert g.take(10, 2, 1, 100, max_inflight=1) == [(1, 1)]
    # neither re-timing nor holding the nacked receipt puts it back in flight past the limit
    assert g.change_invisibility(0, 1, 10, 60_000) is AckOutcome.STALE
    assert g.hold(0, 1, 60_000) is AckOutcome.STALE
    assert g.flying() == 1 and g.waiting == {0}
    assert g.ack(0, 1, 2) is AckOutcome.ACKED, "an ack still takes"


def test_a_group_at_its_limit_sets_its_due_retries_aside_once_and_hands_them_out_in_due_order() -> (
    None
):
    g = GroupState()
    n = 1000
    assert len(g.take(0, n + 1, n, 0, max_inflight=n)) == n
    for off in reversed(range(n)):  # nacked latest-first: due in reverse offset order
        assert g.nack(off, 1, n - off, None) == n - off
    assert g.take(n, n + 1, 1, 60_000, max_inflight=1) == [(999, 2)], "the first due"
    assert g.take(n + 1, n + 1, 10, 60_000, max_inflight=1) == [], "at the limit"
    # the due retries left the redelivery heap for the queue a take reads only with room:
    # a take at the limit no longer pops and pushes back each of them (review 64 #2)
    assert len(g._expiry) == 1 and len(g._due) == n - 1
    assert g.take(n + 2, n + 1, 10, 60_000, max_inflight=1) == []
    assert len(g._expiry) == 1
    assert g.ack(999, 2, n + 1) is AckOutcome.ACKED
    assert g.take(n + 3, n + 1, 2, 60_000, max_inflight=2) == [(998, 2), (997, 2)], "due order"
    assert g.flying() == 2 and len(g.waiting) == n - 3


def test_a_nack_waits_at_least_what_it_is_told_but_never_less_than_the_backoff() -> None:
    g = GroupState()
    assert g.take(0, ready_len=3, max_n=3, invisible_ms=100, max_inflight=10) == [
        (0, 1), (1, 1), (2, 1),
    ]  # fmt: skip
    assert g.nack(0, 1, 10, lambda n: 1000, at_least_ms=5000) == 5010, "a Retry-After: longer"
    assert g.nack(1, 1, 10, lambda n: 1000, at_least_ms=200) == 1010, "the backoff: longer"
    assert g.nack(2, 1, 10, None, at_least_ms=300) == 310, "no backoff: what it is told"
    assert g.take(5009, 3, 10, 100, 10) == [(2, 2), (1, 2)], "in due order; 0 not before 5 s"
    assert g.take(5010, 3, 10, 100, 10) == [(0, 2)]


def test_a_nack_of_the_last_attempt_goes_to_the_dead_letters_at_once_whatever_it_is_told() -> None:
    g = GroupState()
    assert g.take(0, 1, 1, 100, 10, max_attempts=1) == [(0, 1)]
    assert g.nack(0, 1, 10, lambda n: 1000, max_attempts=1, at_least_ms=60_000) == 10
    assert g.take(10, 1, 1, 100, 10, max_attempts=1) == []
    assert g.take_dead() == [(0, 2)]
