"""Timer-wheel arithmetic (pure: no I/O, no clock reads).

Time is cut into slots of ``precision`` ms; slot ``s`` covers [s*p, (s+1)*p).
The wheel file holds ``2 * window_slots`` entries and slot ``s`` lives at index
``s % (2 * window_slots)``, reused lap after lap. A message whose slot is at
least ``window_slots`` ahead of now is *rolled*: parked at the far end of the
window (``now_slot + window_slots - 1``) and re-parked when that slot fires, so
a delay D costs about D / window rolls, not D / precision.

Invariant kept by the engine: it plans every link against
``min(now, scan_cursor * precision)``, so every occupied slot lies in
[scan_cursor - 1, scan_cursor + window_slots): less than two windows wide even
while the scan catches up after downtime, so no unfired slot is ever
overwritten by a later lap.
"""

from __future__ import annotations

import enum

__all__ = ["TimerKind", "plan_timer", "slot_index", "slot_of"]


class TimerKind(enum.IntEnum):
    NORMAL = 0
    ROLL = 1


_NORMAL, _ROLL = TimerKind.NORMAL, TimerKind.ROLL


def slot_of(ms: int, precision_ms: int) -> int:
    return ms // precision_ms


def slot_index(slot: int, window_slots: int) -> int:
    return slot % (2 * window_slots)


def plan_timer(
    deliver_at_ms: int, now_ms: int, precision_ms: int, window_slots: int
) -> tuple[int, TimerKind]:
    """Where a message due at ``deliver_at_ms`` goes in the wheel at ``now_ms``.

    Returns (slot, kind) as a plain tuple (called once per message on the hot path).
    Past-due messages go to the current slot (released at once); messages
    within the window go to their own slot; the rest are parked at the far end
    of the window as a ROLL.
    """
    now_slot = now_ms // precision_ms
    target = deliver_at_ms // precision_ms
    if target < now_slot + window_slots:
        return (target if target > now_slot else now_slot), _NORMAL
    return now_slot + window_slots - 1, _ROLL
