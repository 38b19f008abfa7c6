"""The release buffer (``timers/releasebuffer``): release order by exact ms then seq,
and a fired slot's rows as release rows."""

from __future__ import annotations

import numpy as np
import pytest

from delayq.timers.memory.enqueue import PENDING_DTYPE
from delayq.timers.memory.releasebuffer import DUE_DTYPE, ReleaseBuffer, due_order, slot_run


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
