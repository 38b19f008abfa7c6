"""Timing-wheel arithmetic (``timers/timingwheel``): which slot a message goes to,
rolls of far ones, grouping by slot and full-slot refusals."""

from __future__ import annotations

import numpy as np
import pytest

from delayq.timers.timingwheel import (
    TimerKind,
    group_by_slot,
    overflowing,
    plan,
)


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
