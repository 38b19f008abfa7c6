"""Pure logic: wheel arithmetic, tokens/ids, consumer-group state, release order."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from delayq import tokens
from delayq.delivery.groups import GroupState
from delayq.delivery.receipts import Receipt
from delayq.delivery.types import AckOutcome
from delayq.errors import InvalidArgument
from delayq.ids import MessageId
from delayq.pieces import by_topic, join_rows, rows_at, take_rows
from delayq.store.checkpoint import Checkpoint
from delayq.store.wheel import TimerWheel
from delayq.timers import duecounts
from delayq.timers.duecounts import HOUR, MINUTE, SHORT_MS, DueCounts
from delayq.timers.pending import PENDING_DTYPE
from delayq.timers.releasebuffer import DUE_DTYPE, ReleaseBuffer, due_order, slot_run
from delayq.timers.retention import deletable_count
from delayq.timers.timingwheel import (
    TimerKind,
    group_by_slot,
    overflowing,
    plan,
)
from delayq.timers.topics import TopicBook


def plan_one(due: int, now: int, p: int, w: int) -> tuple[int, TimerKind]:
    """``plan`` of one message with the scan caught up (cursor at now)."""
    slots, inside, _ = plan(np.array([due]), now, now // p + 1, p, w)
    return int(slots[0]), TimerKind.NORMAL if inside[0] else TimerKind.ROLL


def test_plan_inside_window_uses_own_slot() -> None:
    assert plan_one(12_345, 10_000, 100, 50) == (123, TimerKind.NORMAL)


def test_plan_past_due_goes_to_current_slot() -> None:
    assert plan_one(5_000, 10_000, 100, 50) == (100, TimerKind.NORMAL)


def test_plan_beyond_window_parks_at_far_end() -> None:
    # window 50 slots of 100 ms = 5 s; due in 60 s -> park at slot now+49
    assert plan_one(70_000, 10_000, 100, 50) == (149, TimerKind.ROLL)
    # the last slot inside the window is not rolled
    assert plan_one(14_999, 10_000, 100, 50) == (149, TimerKind.NORMAL)
    assert plan_one(15_000, 10_000, 100, 50)[1] is TimerKind.ROLL


def test_plan_against_a_lagging_scan_uses_the_cursor() -> None:
    # the scan is 30 slots behind now (downtime): plan from its cursor, so every
    # slot stays within a window of it
    slots, inside, ref = plan(np.array([12_345, 20_000]), 10_000, 70, 100, 50)
    assert ref == 70
    assert slots.tolist() == [119, 119] and inside.tolist() == [False, False]


def test_rolls_are_bounded_by_delay_over_window() -> None:
    now, due, p, w = 0, 10 * 365 * 86_400_000, 1000, 172_800
    hops = 0
    while True:
        slot, kind = plan_one(due, now, p, w)
        if kind is TimerKind.NORMAL:
            break
        hops += 1
        now = slot * p
    assert hops == pytest.approx(due / (w * p), rel=0.01)


@pytest.mark.parametrize("few", [1 << 30, 0], ids=["one by one", "vectorised"])
def test_many_ids_parse_as_each_alone(few: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "FEW", few)
    good = [str(MessageId(0, 1, 10**p)) for p in range(1, 12)]
    texts: list[Any] = [
        *good[:3],
        "",
        good[3][:-1],
        good[4].swapcase(),
        str(Receipt(1, 2, 3)),  # another kind
        str(MessageId(300, 70_000, 5)),  # leading fields of more than a byte
        tokens.pack_token(0x4D, 0, 1, 2**64 + 5),  # a position beyond int64
        b"bytes",
        *good[5:],
    ]
    cols, errors = MessageId.parse_columns(texts)
    for i, text in enumerate(texts):
        try:
            alone = MessageId.parse(text) if isinstance(text, str) else None
        except InvalidArgument:
            alone = None
        if alone is None:
            assert i in errors or cols[i].tolist() == [0, 0, -1], i
        else:
            assert i not in errors and cols[i].tolist() == [
                alone.shard,
                alone.epoch,
                alone.position,
            ]


def test_a_batch_of_one_prefix_is_judged_by_its_lead_bytes() -> None:
    """A batch whose tokens all share their lead bytes (the usual: one shard and
    epoch) is judged by one row: ids of it parse, a batch of another kind's
    tokens (valid check bytes, same lead in every row) is refused whole."""
    ids = MessageId.texts(2, 5, np.arange(20) * 268 + 4096, ascending=True)
    cols, errors = MessageId.parse_columns(ids)
    assert not errors and cols[:, 2].tolist() == (np.arange(20) * 268 + 4096).tolist()
    receipts = [str(Receipt(2, offset, 5)) for offset in range(100, 120)]
    assert len(set(map(len, receipts))) == 1
    _, errors = MessageId.parse_columns(receipts)
    assert sorted(errors) == list(range(20))
    assert all("kind" in str(e) for e in errors.values())


def test_message_id_round_trip_and_malformed() -> None:
    mid = MessageId(3, 7, 123_456_789)
    text = str(mid)
    assert len(text) <= 12
    assert MessageId.parse(text) == mid
    with pytest.raises(InvalidArgument):
        MessageId.parse(text.swapcase())  # ids are case-sensitive
    for bad in ["", "zzzz", text[:-1], text + "0", "hello world", "i" * 70, "a=b"]:
        with pytest.raises(InvalidArgument) as err:
            MessageId.parse(bad, "ids[2]")
        assert err.value.field == "ids[2]"
    flipped = text[:-2] + ("A" if text[-2] != "A" else "B") + text[-1]
    with pytest.raises(InvalidArgument, match=r"check byte|length|truncated"):
        MessageId.parse(flipped)
    with pytest.raises(InvalidArgument, match="kind"):
        MessageId.parse(str(Receipt(1, 2, 3)))


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
    out = g._expired(now_ms, max_n, deadline)
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
    g.give_back(offsets, attempts, now_ms=5)
    assert (g.committed, g.acked, g.backlog(10)) == (0, set(), 10)
    assert g.take(5, 10, 2, 100, 10) == [(0, 2), (1, 2)], "due again at once, in order"
    # the general path: an out-of-order ack that committed then moves over stays acked
    h = GroupState()
    assert len(h.take(0, 10, 3, 100, 10)) == 3
    assert h.ack(1, 1, 10) is AckOutcome.ACKED
    offsets, attempts = h.take_acked(200, ready_len=10, max_n=3)  # 0 and 2 (expired), 3
    assert (list(offsets), attempts, h.committed) == ([0, 2, 3], [2, 2, 1], 4)
    h.give_back(offsets, attempts, now_ms=200)
    assert (h.committed, h.acked, h.backlog(10)) == (0, {1}, 9)
    assert h.take(200, 10, 10, 100, 10)[:3] == [(0, 3), (2, 3), (3, 2)]
    h.give_back([], [], 300)  # nothing taken: nothing changes
    assert (h.committed, h.acked) == (0, {1})


def test_group_respects_inflight_bound_and_restart_state() -> None:
    g = GroupState()
    assert len(g.take(0, 100, 100, 1000, max_inflight=5)) == 5
    restored = GroupState(committed=2, acked=[4])
    assert [o for o, _ in restored.take(0, 6, 10, 100, 10)] == [2, 3, 5]


def test_release_buffer_orders_by_exact_ms_and_tracks_slots() -> None:
    b = ReleaseBuffer()
    for ms, seq in [(1050, 1), (1010, 2), (1099, 3), (1010, 1)]:
        b.push_run(np.array([(ms, seq, 0, 0, 1, ms // 100)], dtype=DUE_DTYPE))
    assert b.lowest_slot() == 10
    got = b.pop_due(1050, 10)
    pairs = list(zip(got["deliver_at_ms"].tolist(), got["seq"].tolist(), strict=True))
    assert pairs == [(1010, 1), (1010, 2), (1050, 1)]
    assert b.next_due_ms() == 1099
    assert len(b.pop_due(1098, 10)) == 0
    assert len(b.pop_due(2000, 10)) == 1
    assert b.lowest_slot() is None


def test_ids_of_ascending_positions_are_each_id_alone() -> None:
    """The ``ascending`` hint bounds the widths by the ends: ids of positions that
    ascend across byte widths are still each id's own text."""
    import numpy as np

    for positions in (np.arange(100) * 268 + 4096, np.arange(100) * 3000 + 60_000):
        got = MessageId.texts(2, 5, positions, ascending=True)
        assert got == [str(MessageId(2, 5, int(p))) for p in positions]
        assert got == MessageId.texts(2, 5, positions)


@pytest.mark.parametrize("seed", range(6))
def test_batch_token_texts_are_each_token_alone_for_any_prefix_and_width(seed: int) -> None:
    """For prefixes of one- and multi-byte fields and values of every width, each
    text of a batch is the one ``pack`` makes alone, also where a value of 8 bytes
    is widened to 9 or 10 so the text has no padding (they were cut wrong)."""
    rng = np.random.default_rng(seed)
    for _ in range(20):
        fields = [int(f) for f in rng.integers(0, 1 << int(rng.integers(1, 30)), size=2)]
        prefix = tokens.TokenPrefix(0x4D, *fields)
        bits = int(rng.integers(1, 64))
        values = np.unique(rng.integers(0, 1 << bits, size=40, dtype=np.uint64))
        assert prefix.pack_many(values) == [prefix.pack(int(v)) for v in values]
        assert prefix.pack_many(values, ascending=True) == [prefix.pack(int(v)) for v in values]
        # a batch's positions: a short run, within one 64 KiB block or across two
        # (the ascending path takes each check from the low two bytes)
        start = int(rng.integers(0, 1 << bits)) | 0xFF00 * int(rng.integers(0, 2))
        run = (start + np.arange(40) * int(rng.integers(1, 1600))).astype(np.uint64)
        assert prefix.pack_many(run, ascending=True) == [prefix.pack(int(v)) for v in run]


def test_receipts_batch_and_single_forms_agree() -> None:
    import numpy as np

    offsets = np.array([0, 5, 127, 128, 70_000, 2**33], dtype=np.int64)
    texts = Receipt.texts(3, 2, offsets)
    assert texts == [str(Receipt(3, int(o), 2)) for o in offsets]
    many = np.concatenate([offsets, offsets * 3 + 1, np.arange(20) << 20])  # vectorised
    assert Receipt.texts(3, 2, many) == [str(Receipt(3, int(o), 2)) for o in many]
    big = str(Receipt(300, 9, 200))  # leading fields over one byte: the slow path
    parsed = Receipt.parse_many([*texts, big, "nope", texts[0][:-1] + "A"])
    assert parsed[: len(offsets)] == [Receipt(3, int(o), 2) for o in offsets]
    assert parsed[len(offsets)] == Receipt(300, 9, 200)
    bad = parsed[len(offsets) + 1 :]
    assert all(isinstance(b, InvalidArgument) for b in bad)
    assert [b.field for b in bad] == ["receipts[7]", "receipts[8]"]  # type: ignore[union-attr]


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


def test_due_counts_stay_exact_under_any_shape_of_removal() -> None:
    """Removals in one-minute batches (release), sorted spans and unsorted picks
    (cancels) keep every table non-negative and the histogram's total exact."""
    rng = np.random.default_rng(7)
    now = 1_700_000_000_000
    counts = DueCounts()
    near = now + rng.integers(0, SHORT_MS, 3000)
    far = now + rng.integers(SHORT_MS, 40 * HOUR, 2000)
    left = np.concatenate([near, far])
    counts.add_many(near, now)
    counts.add_many(far, now)
    rng.shuffle(left)
    while len(left):
        shape = rng.integers(0, 3)
        if shape == 0:  # all of one minute, as a release batch
            minute = left[0] // MINUTE
            pick = np.flatnonzero(left // MINUTE == minute)[: rng.integers(1, 50)]
        elif shape == 1:  # a sorted run of several minutes
            pick = np.argsort(left)[: rng.integers(1, 300)]
        else:  # unsorted picks, as a cancel
            pick = rng.choice(len(left), min(len(left), int(rng.integers(1, 300))), replace=False)
        counts.remove_many(left[pick])
        left = np.delete(left, pick)
        assert all(v > 0 for v in counts.minute.values())
        assert all(v > 0 for v in counts.hour.values())
        assert sum(c for _, c in counts.histogram(now)) == len(left)
    assert counts.minute == {} and counts.hour == {}


def test_due_counts_fold_tiny_batches_before_a_reader_has_many_to_fold() -> None:
    """A paced release removes a few messages per ms: what a reader (the checkpoint,
    under the engine lock) must fold first stays bounded in batches, not only in
    messages, and the counts stay exact."""
    now = 1_700_000_000_000
    counts = DueCounts()
    dues = now + 60_000 + np.arange(3000, dtype=np.int64) * 7
    for i in range(0, 3000, 3):  # 1,000 batches of 3
        counts.add_many(dues[i : i + 3], now)
        assert len(counts._unfolded) + len(counts._removed) < duecounts._FOLD_PARTS
    for i in range(0, 2000, 2):  # 1,000 batches of 2, as paced release steps
        counts.remove_many(dues[i : i + 2])
        assert len(counts._unfolded) + len(counts._removed) < duecounts._FOLD_PARTS
    assert sum(c for _, c in counts.histogram(now)) == 1000
    assert sum(counts.minute.values()) == 1000


@pytest.mark.parametrize(
    "shape", ["seq down", "seq up", "seq mixed", "seq repeated", "dues far apart", "one"]
)
def test_due_order_matches_a_two_key_sort(shape: str) -> None:
    rng = np.random.default_rng(7)
    n = 1 if shape == "one" else 5000
    run = np.zeros(n, dtype=DUE_DTYPE)
    seq = np.arange(1000, 1000 + n, dtype=np.uint64)
    run["seq"] = {
        "seq down": seq[::-1],
        "seq up": seq,
        "seq mixed": rng.permutation(seq),
        "seq repeated": np.repeat(seq[: n // 2 + 1], 2)[:n],
    }.get(shape, seq[::-1])
    spread = 10**9 if shape == "dues far apart" else 1000
    run["deliver_at_ms"] = 1_700_000_000_000 + rng.integers(0, spread, n)
    run["cl_pos"] = np.arange(n)  # tells the rows apart
    want = run[np.lexsort((run["seq"], run["deliver_at_ms"]))]
    assert due_order(run).tolist() == want.tolist()


def test_slot_run_carries_a_fired_slots_rows_in_due_order() -> None:
    """Pending rows (the near rows) and TimerLog rows alike become release rows of
    their slot, ordered as release hands them out."""
    rows = np.zeros(4, dtype=PENDING_DTYPE)
    rows["deliver_at_ms"] = [30, 10, 30, 20]
    rows["seq"] = [4, 3, 2, 1]  # newest first, as a chain comes
    rows["cl_pos"], rows["cl_size"], rows["topic_id"] = [400, 300, 200, 100], 9, [1, 2, 1, 2]
    run = slot_run(rows, 77)
    assert run.dtype == DUE_DTYPE
    fields = ("deliver_at_ms", "seq", "cl_pos", "topic_id")
    assert list(zip(*(run[f].tolist() for f in fields), strict=True)) == [
        (10, 3, 300, 2),
        (20, 1, 100, 2),
        (30, 2, 200, 1),
        (30, 4, 400, 1),
    ]
    assert set(run["slot"].tolist()) == {77} and set(run["cl_size"].tolist()) == {9}


def test_take_rows_is_fancy_indexing() -> None:
    run = np.zeros(100, dtype=DUE_DTYPE)
    run["seq"] = np.arange(100)
    run["cl_size"] = np.arange(100) * 3
    mask = run["seq"] % 3 == 0
    order = np.random.default_rng(1).permutation(100)
    backwards = run[::-2]  # not contiguous
    assert take_rows(run, mask).tolist() == run[mask].tolist()
    assert take_rows(run, order).tolist() == run[order].tolist()
    assert take_rows(backwards, np.array([3, 0])).tolist() == backwards[[3, 0]].tolist()
    assert take_rows(run, np.zeros(100, dtype=bool)).dtype == DUE_DTYPE


def test_rows_at_reads_records_at_any_byte_offset() -> None:
    data = np.random.default_rng(2).integers(0, 256, 1000, dtype=np.uint8).tobytes()
    offsets = np.array([0, 1, 7, 500, 999 - DUE_DTYPE.itemsize + 1, 3, 3])
    got = rows_at(data, offsets, DUE_DTYPE)
    assert got.dtype == DUE_DTYPE
    assert [r.tobytes() for r in got] == [
        data[o : o + DUE_DTYPE.itemsize] for o in offsets.tolist()
    ]
    assert len(rows_at(b"", offsets[:0], DUE_DTYPE)) == 0
    got["seq"] = 0  # a copy: writable, whatever the buffer


@pytest.mark.parametrize(
    "span, base_shift",
    [(1, 0), (50, 0), (60_000, 0), (172_800, 0), (3 << 31, 0), (1000, 7), (1000, -5)],
)
def test_group_by_slot_is_a_stable_sort_then_unique(span: int, base_shift: int) -> None:
    """Every radix path (one u16 pass, two passes, the plain sort for wide or
    negative offsets) orders like a stable argsort and finds the same runs."""
    rng = np.random.default_rng(span)
    base = 1_700_000_000
    slots = base + rng.integers(0, span, 3000)
    slots[::7] = slots[0]  # long runs of one slot
    order, uniq, starts, counts = group_by_slot(slots, base + base_shift)
    assert order.tolist() == np.argsort(slots, kind="stable").tolist()
    want = np.unique(slots, return_index=True, return_counts=True)
    assert [uniq.tolist(), starts.tolist(), counts.tolist()] == [
        want[0].tolist(),
        np.unique(slots[order], return_index=True)[1].tolist(),
        want[2].tolist(),
    ]
    assert [len(a) for a in group_by_slot(slots[:0], base)] == [0, 0, 0, 0]


@pytest.mark.parametrize("seed", range(6))
def test_overflowing_refuses_the_later_arrivals_of_a_full_slot(seed: int) -> None:
    """Against filling the slots one message at a time, in arrival order."""
    rng = np.random.default_rng(seed)
    base, limit = 5_000, int(rng.integers(1, 8))
    slots = base + rng.integers(0, 6, int(rng.integers(1, 40)))
    held = {base + k: int(rng.integers(0, limit + 2)) for k in range(6)}
    asked: list[list[int]] = []

    def held_now(uniq: np.ndarray) -> np.ndarray:
        asked.append(uniq.tolist())
        return np.array([held[s] for s in uniq.tolist()], dtype=np.int64)

    fill, want = dict(held), []
    for i, slot in enumerate(slots.tolist()):
        if fill[slot] >= limit:
            want.append(i)
        else:
            fill[slot] += 1
    assert overflowing(slots, base, held_now, limit).tolist() == want
    assert asked == [sorted(set(slots.tolist()))]  # each distinct slot read once


def test_overflowing_nothing_when_every_slot_has_room() -> None:
    slots = np.array([7, 7, 9, 7])
    assert overflowing(slots, 0, lambda u: np.zeros(len(u), dtype=np.int64), 3).tolist() == []
    assert overflowing(slots, 0, lambda u: np.array([0, 3]), 3).tolist() == [2]
    assert overflowing(slots[:0], 0, lambda u: u, 3).tolist() == []


def test_join_rows_is_concatenate() -> None:
    run = np.zeros(50, dtype=DUE_DTYPE)
    run["seq"] = np.arange(50)
    parts = [run[:10], run[30:20:-1], run[40:41], run[::7]]  # views, reversed, strided
    got = join_rows(parts, DUE_DTYPE)
    assert got.tolist() == np.concatenate(parts).tolist()
    got["seq"] = 0  # writable, and a copy
    assert run["seq"][5] == 5
    assert join_rows([run[:3]], DUE_DTYPE).tolist() == run[:3].tolist()
    assert len(join_rows([], DUE_DTYPE)) == 0


def test_the_engine_leaves_no_lazy_numpy_import_for_its_first_np_unique() -> None:
    """numpy imports numpy.ma on the first np.unique call (~25 ms): loading the engine
    must already have done it, or the first batch that calls np.unique (ids crossing
    a width, a cancel naming an id twice) stalls under the engine's lock."""
    code = "import sys, delayq.engine; print('numpy.ma' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "True"


def test_retention_deletes_the_leading_segments_whose_successor_is_old_and_covered() -> None:
    segs = [(0, 100), (1000, 200), (2000, 300), (3000, 400)]  # (base, created_ms)
    assert deletable_count(segs, created_before_ms=250, upto=10_000) == 1
    assert deletable_count(segs, created_before_ms=200, upto=10_000) == 0, "strictly before"
    assert deletable_count(segs, created_before_ms=301, upto=10_000) == 2
    assert deletable_count(segs, created_before_ms=10**9, upto=10_000) == 3, "never the newest"
    assert deletable_count(segs, created_before_ms=10**9, upto=1999) == 1, "not past upto"
    assert deletable_count(segs, created_before_ms=10**9, upto=2000) == 2
    assert deletable_count(segs[:1], created_before_ms=10**9, upto=10_000) == 0
    assert deletable_count([], created_before_ms=10**9, upto=10_000) == 0
    # oldest first: a young segment stops the count even if later ones look old
    assert deletable_count([(0, 1), (10, 500), (20, 2)], created_before_ms=100, upto=99) == 0


def test_the_topic_book_counts_each_way_a_message_leaves_and_survives_a_checkpoint() -> None:
    book = TopicBook()
    for name in ("a", "b"):
        book.define(book.next_id(), name)
    assert book.ids == {"a": 1, "b": 2} and book.names == {1: "a", 2: "b"}
    now = 1_000_000
    dues = np.array([now + 10, now + 20, now + 90_000, now + 30], dtype=np.int64)
    book.accepted([1, 2, 1, 1], dues, now)  # one row of b among a's
    book.accepted(2, dues[:2], now)  # one topic for the whole batch
    book.left(np.array([1]), dues[:1], cancelled=True)
    book.left(np.array([2]), dues[1:2], cancelled=False)  # rescheduled: not a cancel
    book.delivered(1, [now + 30])
    assert book.counts(1) == (1, 1, 1) and book.counts(2) == (2, 0, 0)
    assert book.total_pending() == 3 and book.counts(9) == (0, 0, 0)
    assert book.pending_by_name() == {"a": 1, "b": 2}
    pending_by_due = {t: sum(c for _, c in book.due_counts(t).histogram(now)) for t in (1, 2)}
    assert pending_by_due == {1: 1, 2: 2}, "due counts hold exactly the pending ones"
    ckpt = Checkpoint(shard=0, epoch=1)
    book.save_to(ckpt)
    again = TopicBook()
    again.load_from(ckpt)
    assert (again.ids, again.names) == (book.ids, book.names)
    assert [again.counts(t) for t in (1, 2)] == [book.counts(t) for t in (1, 2)]
    assert again.due_counts(2).histogram(now) == book.due_counts(2).histogram(now)
    assert again.next_id() == 3


def test_by_topic_selects_each_topics_rows() -> None:
    assert by_topic(7) == [(7, slice(None))]
    assert by_topic(np.array([3, 3])) == [(3, slice(None))], "one topic: no mask"
    assert by_topic([]) == []
    got = {t: np.flatnonzero(m).tolist() for t, m in by_topic([2, 1, 2])}
    assert got == {1: [1], 2: [0, 2]}


def test_wheel_slots_share_a_place_every_two_windows(tmp_path: Path) -> None:
    # a wheel of 2 x 10 slots: slot 25 lives where slot 5 did, which then reads empty
    wheel = TimerWheel(tmp_path / "timerwheel", 20, 100, 0)
    try:
        wheel.put(5, 64, 64, 1)
        assert wheel.get(5) is not None
        wheel.put(25, 128, 128, 1)
        assert wheel.get(5) is None, "another lap's slot is empty"
        assert wheel.get(25) == (128, 128, 1)
    finally:
        wheel.close()
