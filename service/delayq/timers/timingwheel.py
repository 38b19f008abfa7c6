"""Timing-wheel arithmetic: the one place that turns times into wheel slots
(pure: no I/O, no clock reads; arrays in, arrays out).

Time is cut into slots of ``p`` (``precision_ms``) ms; slot ``s`` covers
[s*p, (s+1)*p). The wheel file holds ``2 * w`` (``window_slots``) entries and
slot ``s`` lives at index ``s % (2 * w)``, reused lap after lap. Three
questions are answered here, and nowhere else:

- **plan** (link): which slot a message goes to. A message due inside the
  window goes to its own slot (a past-due one to the current slot); a message
  due a window or more ahead is *rolled*: parked at the far end of the window
  (``ref + w - 1``, kind ROLL) and re-planned when that slot fires, so a delay
  D costs about D / (w * p) rolls, not D / p.
- **admit** (accept): which messages a full slot refuses (``slot_limit``).
- **fire** (scan): up to which slot the scan fires now, and how far ahead of
  the last checkpoint it may run.

Worked example, p = 100 ms, w = 50 slots (a 5 s window), now = 10,000 ms
(slot 100), scan cursor at slot 100::

    due 12,345  -> slot 123, NORMAL   (inside the window: its own slot)
    due  5,000  -> slot 100, NORMAL   (past due: the current slot, released at once)
    due 14,999  -> slot 149, NORMAL   (the window's last slot)
    due 15,000  -> slot 149, ROLL     (a window ahead: parked at the far end)
    due 70,000  -> slot 149, ROLL     (fires at 14,900, re-planned then: slot 198,
                                       ROLL again, ... until inside the window)

Invariant: every link is planned against ``ref = min(now, cursor * p) // p``,
not the wall clock alone, so every occupied slot lies in
[cursor - 1, cursor + w): less than two windows wide even while the scan
catches up after downtime or a clock jump, so no unfired slot is ever
overwritten by a later lap. The scan keeps the other half of the bargain: it
never fires more than a window (less ``SCAN_LEAD_SLOTS``) ahead of the cursor
the last checkpoint saved (``scan_horizon``), so after a kill the restart's
cursor is again within a window of every linked slot.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

import numpy as np

from ..batchops import high, low

__all__ = [
    "TimerKind",
    "admit",
    "beyond_window",
    "fire_through",
    "fired_before_ms",
    "fires_at",
    "group_by_slot",
    "kinds",
    "overflowing",
    "plan",
    "scan_horizon",
    "slot_of",
]


class TimerKind(enum.IntEnum):
    NORMAL = 0
    ROLL = 1


_NORMAL, _ROLL = int(TimerKind.NORMAL), int(TimerKind.ROLL)


def plan(
    deliver_at_ms: np.ndarray, now_ms: int, cursor: int, p: int, w: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """Where messages due at ``deliver_at_ms`` go, planned at ``now_ms`` with the
    scan at slot ``cursor``: ``(slots, inside, ref)``, ``inside`` false for a ROLL
    (parked at the window's far end), ``ref`` the slot planned from (no slot is
    below it). See the module docstring."""
    ref = min(now_ms, cursor * p) // p
    target = deliver_at_ms // p
    inside = target < ref + w
    slots = np.where(inside, np.maximum(target, ref), ref + w - 1)
    return slots, inside, ref


def kinds(inside: np.ndarray) -> np.ndarray:
    """The TimerKind of each planned message (as small ints, for TimerLog records)."""
    out: np.ndarray = np.where(inside, _NORMAL, _ROLL)
    return out


def admit(
    deliver_at_ms: np.ndarray,
    now_ms: int,
    p: int,
    w: int,
    limit: int,
    held_max: Callable[[np.ndarray], int],
    held: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray:
    """Indices of the messages (in arrival order) whose slot would pass ``limit``.

    Messages beyond the window are rolled and counted where they finally land,
    not here. ``held_max(slots)`` is the most any of those slots holds now and
    ``held(uniq)`` what each distinct slot (ascending) holds: the wheel's reads."""
    now_slot = now_ms // p
    slots = np.maximum(deliver_at_ms // p, now_slot)
    inside = np.flatnonzero(slots < now_slot + w)
    if not len(inside):
        return inside
    if held_max(slots[inside]) + len(inside) <= limit:
        return inside[:0]  # even all of them in one slot would fit
    over: np.ndarray = inside[overflowing(slots[inside], now_slot, held, limit)]
    return over


def beyond_window(deliver_at_ms: np.ndarray, now_ms: int, p: int, w: int) -> bool:
    """Whether every message is due a window or more ahead (all rolled)."""
    return int(low(deliver_at_ms)) // p >= now_ms // p + w


def slot_of(ms: int, p: int) -> int:
    """The slot that covers ``ms``."""
    return ms // p


def fires_at(slot: int, p: int, lead_ms: int) -> int:
    """When the scan fires ``slot`` (the inverse of ``fire_through``)."""
    return slot * p - lead_ms


def fire_through(now_ms: int, p: int, lead_ms: int) -> int:
    """The last slot the scan fires at ``now_ms``: slots fire ``lead_ms`` before
    they start, so their chains are read before their first messages are due."""
    return (now_ms + lead_ms) // p


def scan_horizon(durable_cursor: int, w: int, lead_slots: int) -> int:
    """The first slot the scan may not fire yet: a window (less the scan lead) past
    the cursor of the last saved checkpoint, where a restart would resume."""
    return durable_cursor + max(1, w - lead_slots)


def fired_before_ms(scan_from_slot: int, p: int, w: int) -> int:
    """A time such that every record written before it has had its slot fired,
    when the scan resumes at ``scan_from_slot``: a record written at t lies at
    most a window (plus one slot) after t."""
    return scan_from_slot * p - w * p - p


def group_by_slot(
    slots: np.ndarray, base: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Group a link batch by slot, keeping arrival order within a slot.

    Returns ``(order, uniq, starts, counts)``: ``slots[order]`` is sorted (stably),
    and the run of distinct slot ``uniq[k]`` in it starts at ``starts[k]`` and is
    ``counts[k]`` long; the same as a stable argsort then ``np.unique``. Slots at
    most 2**32 past ``base`` (a link batch spans at most a window) sort as u16
    digits by radix, one or two passes: 3,000 slots in ~35 instead of ~80 µs, and
    the runs come from the sorted array's edges instead of a second sort."""
    n = len(slots)
    if not n:
        empty = np.zeros(0, dtype=np.int64)
        return empty, slots[:0], empty, empty
    rel = slots - base
    lo, hi = int(low(rel)), int(high(rel))
    if lo < 0 or hi >= 1 << 32:
        order = np.argsort(slots, kind="stable")
    elif hi < 1 << 16:
        order = np.argsort(rel.astype(np.uint16), kind="stable")
    else:  # low digit first, then a stable pass on the high digit
        digits = rel.astype(np.uint32)
        order = np.argsort(digits.astype(np.uint16), kind="stable")
        order = order[np.argsort((digits >> 16).astype(np.uint16)[order], kind="stable")]
    ordered = slots[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    counts = np.diff(np.append(starts, n))
    return order, ordered[starts], starts, counts


def overflowing(
    slots: np.ndarray, base: int, held: Callable[[np.ndarray], np.ndarray], limit: int
) -> np.ndarray:
    """Which messages a full slot refuses: indices into ``slots`` (each message's
    wheel slot, in arrival order, at most 2**32 past ``base``) of the messages that
    would find their slot already holding ``limit``. ``held(uniq)`` says how many
    each distinct slot (ascending) holds now. Earlier arrivals are taken first."""
    order, uniq, starts, counts = group_by_slot(slots, base)
    if not len(order):
        return order
    now_held = held(uniq)
    if int((now_held + counts).max()) <= limit:
        return order[:0]  # the common case: no slot near its limit
    # a message's place in its slot: what the slot held plus the arrivals before it
    place = np.repeat(now_held - starts, counts) + np.arange(len(order))
    return np.sort(order[place >= limit])
