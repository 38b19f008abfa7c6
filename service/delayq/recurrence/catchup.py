"""One step of a schedule's plan (pure): at ``now``, which nominal times to fire
and the state that follows.

The plan waits for nominal time T (``state.next_fire_ms``). At ``now`` the times
due to be written are those t >= T with t <= now + lead. Those with t < now are
late; a late one was **missed** only if the shard could not fire it: it came
before this master began firing (``since_ms``: the open or promotion that made
it the master, ``timers.office.Office.firing_since_ms``: the shard was down, had
no master, or this one was recovering) or before the schedule's last resume
(``state.resumed_ms``: it came while paused). A late one that came while this
master was firing (its firer busy, a long step, a slow disk) was not missed: it
fires, at once, under every policy. The spec's ``catch_up`` decides which missed
ones fire (due at once), the others are skipped and counted in ``missed``:

- ``none``: none;
- ``latest``: the latest one, when it is within ``catch_up_window_ms`` of now;
- ``all``: every one within the window, in order.

Then the late ones not missed and the on-time ones (now <= t <= now + lead)
fire, the latter at their own time. The next state waits for the first nominal
time after those (0 and ``ended`` when the schedule has none left);
``last_fire_ms`` is the last fired, ``fired`` and ``missed`` grow by what this
step fired and skipped.

A step is bounded: it fires at most ``MAX_FIRINGS_PER_STEP`` times and walks
over at most ``MAX_PASSED_PER_STEP`` missed times of a cron expression (an
interval's are counted, not walked). Past a bound the next state waits for the
first time not yet decided, which is then already due: the next step goes on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .calendar import next_after, pass_before
from .spec import CatchUp, ScheduleSpec, ScheduleState
from .states import LEAD_MS

__all__ = ["MAX_FIRINGS_PER_STEP", "MAX_PASSED_PER_STEP", "Step", "step"]

MAX_FIRINGS_PER_STEP = 1000
"""Most firings one step writes (one CommitLog append with the plan's next copy)."""
MAX_PASSED_PER_STEP = 10_000
"""Most missed nominal times of a cron expression one step walks over (~10 ms)."""


@dataclass(frozen=True, slots=True)
class Step:
    """What a step decided: the nominal times to fire now (in order), how many it
    skipped, and the schedule's next state."""

    fire: list[int]
    skipped: int
    state: ScheduleState


def step(
    spec: ScheduleSpec,
    state: ScheduleState,
    now_ms: int,
    lead_ms: int = LEAD_MS,
    since_ms: int | None = None,
) -> Step:
    """The step of a plan popped at ``now_ms`` (module docstring); ``since_ms``:
    when this master began firing (None: now, every late time was missed). A
    paused or ended schedule, or one whose next time is not yet within
    ``lead_ms``, fires nothing and keeps its state."""
    first = state.next_fire_ms
    if state.paused or state.ended or not first or first > now_ms + lead_ms:
        return Step([], 0, state)
    anchor = state.anchor_ms
    # before this the times were missed (the shard could not fire them)
    horizon = min(now_ms, max(now_ms if since_ms is None else since_ms, state.resumed_ms))
    # the missed times no policy fires: all under NONE, those before the window else
    drop_before = horizon
    if spec.catch_up is not CatchUp.NONE:
        drop_before = min(horizon, now_ms - spec.catch_up_window_ms)
    dropped = pass_before(spec, first, drop_before, MAX_PASSED_PER_STEP, anchor)
    fire: list[int] = []
    skipped, t = dropped.count, dropped.next
    if t is not None and t < drop_before:  # the walk's bound: the rest next step
        return _next(state, fire, skipped, t)
    if spec.catch_up is CatchUp.LATEST and t is not None and t < horizon:
        missed = pass_before(spec, t, horizon, MAX_PASSED_PER_STEP, anchor)
        if missed.next is not None and missed.next < horizon:  # bound: the latest is further
            return _next(state, fire, skipped + missed.count, missed.next)
        fire.append(missed.last)
        skipped, t = skipped + missed.count - 1, missed.next
    # ALL's missed ones in the window, the late ones not missed, then the on-time ones
    while t is not None and t <= now_ms + lead_ms and len(fire) < MAX_FIRINGS_PER_STEP:
        fire.append(t)
        t = next_after(spec, t, anchor)
    return _next(state, fire, skipped, t)


def _next(state: ScheduleState, fire: list[int], skipped: int, nxt: int | None) -> Step:
    return Step(
        fire,
        skipped,
        dataclasses.replace(
            state,
            ended=nxt is None,
            next_fire_ms=nxt or 0,
            last_fire_ms=fire[-1] if fire else state.last_fire_ms,
            fired=state.fired + len(fire),
            missed=state.missed + skipped,
        ),
    )
