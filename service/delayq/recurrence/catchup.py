"""One step of a schedule's plan (pure): at ``now``, which nominal times to fire
and the state that follows.

The plan waits for nominal time T (``state.next_fire_ms``). At ``now`` the times
due to be written are those t >= T with t <= now + lead. Those with t < now are
late; a late one was **missed** only if the shard could not fire it: it came
before this master began firing (``since_ms``: the open, promotion or lease renewal that made
it the master, ``timers.office.Office.firing_since_ms``: the shard was down, had
no master, this one was recovering or its lease had lapsed) or before the schedule's last resume
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

A step is bounded: it fires at most ``MAX_FIRINGS_PER_STEP`` times and
computes at most ``budget`` nominal times (``MAX_PASSED_PER_STEP`` at most:
missed times of a cron expression walked over, an interval's counted, not
walked, and each firing's next). Past a bound the next state waits for the
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
"""Most missed nominal times of a cron expression one step walks over (each
some us: up to ~90 ms in a zone with daylight saving, on a loaded machine);
a caller stepping many plans at once shares a smaller budget among them
(``step``'s ``budget``, ``engine.firing.STEP_BUDGET``)."""


@dataclass(frozen=True, slots=True)
class Step:
    """What a step decided: the nominal times to fire now (in order), how many it
    skipped, and the schedule's next state."""

    fire: list[int]
    skipped: int
    state: ScheduleState
    cost: int = 0
    """Nominal times computed: a cron expression's walked over, one an interval's
    count, and one per firing (its next): what ``budget`` bounds."""


def step(
    spec: ScheduleSpec,
    state: ScheduleState,
    now_ms: int,
    lead_ms: int = LEAD_MS,
    since_ms: int | None = None,
    budget: int = MAX_PASSED_PER_STEP,
) -> Step:
    """The step of a plan popped at ``now_ms`` (module docstring); ``since_ms``:
    when this master began firing (None: now, every late time was missed);
    ``budget`` (>= 1): the most nominal times it computes (``Step.cost``; at most
    ``MAX_PASSED_PER_STEP``), the rest left to the next step. A paused or ended
    schedule, or one whose next time is not yet within ``lead_ms``, fires
    nothing and keeps its state."""
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
    budget = max(1, min(budget, MAX_PASSED_PER_STEP))
    dropped = pass_before(spec, first, drop_before, budget, anchor)
    fire: list[int] = []
    skipped, t = dropped.count, dropped.next
    cost = _walked(spec, dropped.count)
    if t is not None and t < drop_before:  # the walk's bound: the rest next step
        return _next(state, fire, skipped, t, cost)
    if spec.catch_up is CatchUp.LATEST and t is not None and t < horizon:
        missed = pass_before(spec, t, horizon, max(1, budget - cost), anchor)
        cost += _walked(spec, missed.count)
        if missed.next is not None and missed.next < horizon:  # bound: the latest is further
            return _next(state, fire, skipped + missed.count, missed.next, cost)
        fire.append(missed.last)
        skipped, t = skipped + missed.count - 1, missed.next
    # ALL's missed ones in the window, the late ones not missed, then the on-time ones
    while (
        t is not None
        and t <= now_ms + lead_ms
        and len(fire) < MAX_FIRINGS_PER_STEP
        and (cost < budget or not fire)
    ):
        fire.append(t)
        t = next_after(spec, t, anchor)
        cost += 1
    return _next(state, fire, skipped, t, cost)


def _walked(spec: ScheduleSpec, passed: int) -> int:
    """What passing ``passed`` nominal times cost: each walked for a cron
    expression, one count for an interval."""
    return passed if not spec.every_ms else min(passed, 1)


def _next(state: ScheduleState, fire: list[int], skipped: int, nxt: int | None, cost: int) -> Step:
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
        cost,
    )
