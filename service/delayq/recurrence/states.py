"""A schedule's state through its life (pure): made, updated, paused, resumed,
and when its plan message is due. Each takes the time of the change (``now_ms``)
and returns a new ``ScheduleState``; firing it is ``catchup.step``'s.

- made: the first nominal time after now (so nothing before creation fires);
  an interval without ``start_ms`` is anchored at now (first firing now + every);
- updated: the same counts, the next nominal time recomputed from now (and
  after the last fired one); paused stays paused; an interval keeps its anchor
  unless the new spec gives a start;
- paused: nothing else changes; the plan is parked;
- resumed: the plan goes on from the first nominal time it had not decided
  (fired or skipped) when paused (a pause leaves ``next_fire_ms`` as it was),
  and the time of the resume is kept (``resumed_ms``): those come while paused
  are missed, caught up by the spec's policy at the plan's next step (each time
  decided once: none counted missed twice).

The plan (the schedule's message in the reserved ``_schedules`` topic) is due
its lead (``lead_of``: ``LEAD_MS`` plus up to ``LEAD_SPREAD_MS``, fixed by a hash
of the schedule's name) before its next nominal time, so firings are written
ahead of their due time, and the plans of many schedules on one nominal time
(a herd on ``* * * * *``) come due spread over ~20 s before it instead of all in
one millisecond; a paused or ended plan is parked ``PARK_MS`` ahead.
"""

from __future__ import annotations

import dataclasses
import hashlib

from .calendar import next_after
from .spec import DAY_MS, ScheduleSpec, ScheduleState

__all__ = [
    "LEAD_MS",
    "LEAD_SPREAD_MS",
    "LEAD_STEP_MS",
    "MAX_LEAD_MS",
    "PARK_MS",
    "lead_of",
    "new_state",
    "paused_state",
    "plan_due_ms",
    "resumed_state",
    "updated_state",
]

LEAD_MS = 1000
"""How long before a nominal time its firing is written: the firing is then an
ordinary pending message, replicated before it is due."""
LEAD_SPREAD_MS = 19_000
"""The spread of plans' leads (``lead_of``): a plan's lead is ``LEAD_MS`` plus a
hash of its name modulo this, in steps of ``LEAD_STEP_MS``."""
LEAD_STEP_MS = 100
"""The leads' step: a herd's plans come due in at most 190 distinct ms, each a
release step firing many (one append each), not one step per plan."""
MAX_LEAD_MS = LEAD_MS + LEAD_SPREAD_MS
"""The longest lead: how far ahead of its nominal time a firing may be written."""
PARK_MS = 365 * DAY_MS
"""How far ahead a paused or ended plan waits (a resume or update re-times it)."""


def new_state(spec: ScheduleSpec, now_ms: int) -> ScheduleState:
    anchor = spec.start_ms or now_ms
    nxt = next_after(spec, now_ms, anchor)
    return ScheduleState(
        ended=nxt is None,
        next_fire_ms=nxt or 0,
        anchor_ms=anchor,
        created_ms=now_ms,
        updated_ms=now_ms,
    )


def updated_state(spec: ScheduleSpec, state: ScheduleState, now_ms: int) -> ScheduleState:
    anchor = spec.start_ms or state.anchor_ms or now_ms
    nxt = next_after(spec, max(now_ms, state.last_fire_ms), anchor)
    return dataclasses.replace(
        state, ended=nxt is None, next_fire_ms=nxt or 0, anchor_ms=anchor, updated_ms=now_ms
    )


def paused_state(state: ScheduleState, now_ms: int) -> ScheduleState:
    return dataclasses.replace(state, paused=True, updated_ms=now_ms)


def resumed_state(spec: ScheduleSpec, state: ScheduleState, now_ms: int) -> ScheduleState:
    nxt = state.next_fire_ms or next_after(
        spec, state.last_fire_ms or state.created_ms, state.anchor_ms
    )
    return dataclasses.replace(
        state,
        paused=False,
        ended=nxt is None,
        next_fire_ms=nxt or 0,
        updated_ms=now_ms,
        resumed_ms=now_ms,
    )


def lead_of(name: str) -> int:
    """How long before a nominal time schedule ``name``'s plan writes its firing:
    ``LEAD_MS`` plus a hash of the name modulo ``LEAD_SPREAD_MS``, rounded down
    to a whole ``LEAD_STEP_MS``, the same for the same name always (on every node, across
    restarts; a version that changes it moves a plan's next due time only)."""
    digest = hashlib.blake2b(name.encode(), digest_size=8, person=b"delayq-lead").digest()
    spread = int.from_bytes(digest, "big") % LEAD_SPREAD_MS
    return LEAD_MS + spread // LEAD_STEP_MS * LEAD_STEP_MS


def plan_due_ms(state: ScheduleState, now_ms: int, lead_ms: int = LEAD_MS) -> int:
    """When the plan of a schedule in ``state`` is due: ``lead_ms`` before its
    next nominal time, or parked when paused or ended."""
    if state.paused or state.ended:
        return now_ms + PARK_MS
    return state.next_fire_ms - lead_ms
