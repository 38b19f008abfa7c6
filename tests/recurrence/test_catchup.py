"""One step of a schedule's plan (``recurrence.catchup.step``) and a schedule's
life (``recurrence.states``): each catch-up policy with missed times inside and
outside its window, the bounds of one step (the rest in the next, at once),
ended, paused and resumed schedules; and, over random specs and random pop
times, that every nominal time is fired once or counted missed, never twice,
never before it is within the lead."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delayq.recurrence.calendar import firings
from delayq.recurrence.catchup import MAX_FIRINGS_PER_STEP, MAX_PASSED_PER_STEP, step
from delayq.recurrence.spec import CatchUp, MessageTemplate, ScheduleSpec, ScheduleState
from delayq.recurrence.states import (
    LEAD_MS,
    LEAD_SPREAD_MS,
    LEAD_STEP_MS,
    PARK_MS,
    lead_of,
    new_state,
    paused_state,
    plan_due_ms,
    resumed_state,
    updated_state,
)
from tests.support.sizes import size

T0 = 1_767_225_600_000  # 2026-01-01T00:00Z
SECOND = 1000


def every_second(**kw: Any) -> ScheduleSpec:
    return ScheduleSpec(MessageTemplate("t"), every_ms=SECOND, start_ms=T0, **kw)


def waiting(at: int, **kw: Any) -> ScheduleState:
    return ScheduleState(next_fire_ms=at, anchor_ms=T0, created_ms=T0, **kw)


def seconds(first: int, last: int) -> list[int]:
    """The nominal times of ``every_second`` from second ``first`` to ``last``."""
    return [T0 + s * SECOND for s in range(first, last + 1)]


def test_on_time_fires_what_is_within_the_lead() -> None:
    got = step(every_second(), waiting(T0 + 10 * SECOND), T0 + 9 * SECOND)
    assert got.fire == seconds(10, 10)  # now + lead = second 10
    assert got.skipped == 0
    assert got.state.next_fire_ms == T0 + 11 * SECOND
    assert (got.state.last_fire_ms, got.state.fired, got.state.missed) == (T0 + 10 * SECOND, 1, 0)


def test_not_yet_within_the_lead_fires_nothing() -> None:
    state = waiting(T0 + 10 * SECOND)
    got = step(every_second(), state, T0 + 10 * SECOND - LEAD_MS - 1)
    assert (got.fire, got.skipped, got.state) == ([], 0, state)


# down for 30 s: the plan waited for second 10 and pops at second 40
DOWN = waiting(T0 + 10 * SECOND)
BACK = T0 + 40 * SECOND
CATCH_UP = [
    # policy, window (s), fired missed, skipped
    pytest.param(CatchUp.NONE, 3600, [], 30, id="none"),
    pytest.param(CatchUp.LATEST, 3600, seconds(39, 39), 29, id="latest"),
    pytest.param(CatchUp.LATEST, 5, seconds(39, 39), 29, id="latest-in-short-window"),
    pytest.param(CatchUp.ALL, 3600, seconds(10, 39), 0, id="all"),
    pytest.param(CatchUp.ALL, 5, seconds(35, 39), 25, id="all-in-window"),
]


@pytest.mark.parametrize(("policy", "window_s", "caught_up", "skipped"), CATCH_UP)
def test_catch_up_after_the_shard_was_down(
    policy: CatchUp, window_s: int, caught_up: list[int], skipped: int
) -> None:
    spec = every_second(catch_up=policy, catch_up_window_ms=window_s * SECOND)
    got = step(spec, DOWN, BACK)
    assert got.fire == caught_up + seconds(40, 41)  # then the on-time ones
    assert got.skipped == skipped
    assert got.state.missed == skipped
    assert got.state.fired == len(got.fire)
    assert got.state.next_fire_ms == T0 + 42 * SECOND


def test_latest_outside_its_window_is_skipped() -> None:
    """Every missed time is older than the window: none fires."""
    spec = ScheduleSpec(MessageTemplate("t"), every_ms=60 * SECOND, start_ms=T0)
    spec = dataclasses.replace(spec, catch_up_window_ms=5 * SECOND)
    got = step(spec, waiting(T0), T0 + 10 * 60 * SECOND + 30 * SECOND)
    assert got.fire == []
    assert got.skipped == 11  # minutes 0..10
    assert got.state.next_fire_ms == T0 + 11 * 60 * SECOND


def test_all_is_bounded_per_step_and_goes_on_at_once() -> None:
    spec = every_second(catch_up=CatchUp.ALL, catch_up_window_ms=86_400_000)
    now = T0 + 5000 * SECOND
    state, fired = waiting(T0), []
    for _ in range(10):
        got = step(spec, state, now)
        assert len(got.fire) <= MAX_FIRINGS_PER_STEP
        fired += got.fire
        state = got.state
        if plan_due_ms(state, now) > now:
            break
    assert fired == seconds(0, 5001)
    assert state.next_fire_ms == T0 + 5002 * SECOND and state.fired == 5002


def test_a_long_cron_backlog_is_walked_over_in_bounded_steps() -> None:
    """Every second, down for a day, policy none: 86,400 missed times, walked
    over ``MAX_PASSED_PER_STEP`` a step, counted exactly."""
    spec = ScheduleSpec(MessageTemplate("t"), cron="* * * * * *", catch_up=CatchUp.NONE)
    now = T0 + 86_400 * SECOND
    state, steps, fired = waiting(T0), 0, []
    while True:
        got = step(spec, state, now)
        steps, fired, state = steps + 1, fired + got.fire, got.state
        if plan_due_ms(state, now) > now:
            break
    assert steps == 86_400 // MAX_PASSED_PER_STEP + 1
    assert state.missed == 86_400
    assert fired == [now, now + SECOND]


def test_latest_with_a_long_cron_backlog_fires_the_very_latest() -> None:
    spec = ScheduleSpec(MessageTemplate("t"), cron="* * * * * *", catch_up_window_ms=7 * 86_400_000)
    now = T0 + 30_000 * SECOND + 500
    state, fired = waiting(T0), []
    while plan_due_ms(state, now) <= now:
        got = step(spec, state, now)
        fired, state = fired + got.fire, got.state
    assert fired == [T0 + 30_000 * SECOND, T0 + 30_001 * SECOND]
    assert state.missed == 30_000


def test_the_last_firing_ends_the_schedule() -> None:
    spec = every_second(end_ms=T0 + 12 * SECOND)
    got = step(spec, waiting(T0 + 11 * SECOND), T0 + 11 * SECOND)
    assert got.fire == seconds(11, 12)
    assert got.state.ended and got.state.next_fire_ms == 0
    assert plan_due_ms(got.state, T0) == T0 + PARK_MS
    again = step(spec, got.state, T0 + 100 * SECOND)
    assert (again.fire, again.skipped, again.state) == ([], 0, got.state)


def test_missed_times_past_the_end_are_not_counted() -> None:
    spec = every_second(end_ms=T0 + 5 * SECOND, catch_up=CatchUp.NONE)
    got = step(spec, waiting(T0), T0 + 60 * SECOND)
    assert (got.fire, got.skipped, got.state.ended) == ([], 6, True)


def test_a_paused_schedule_fires_nothing_and_is_parked() -> None:
    state = paused_state(waiting(T0 + 10 * SECOND), T0 + 5 * SECOND)
    got = step(every_second(), state, T0 + 50 * SECOND)
    assert (got.fire, got.skipped, got.state) == ([], 0, state)
    assert plan_due_ms(state, T0 + 5 * SECOND) == T0 + 5 * SECOND + PARK_MS


@pytest.mark.parametrize(
    ("policy", "fired"),
    [(CatchUp.NONE, []), (CatchUp.LATEST, seconds(29, 29)), (CatchUp.ALL, seconds(11, 29))],
)
def test_times_missed_while_paused_are_caught_up_on_resume(
    policy: CatchUp, fired: list[int]
) -> None:
    spec = every_second(catch_up=policy)
    fired_up_to_10 = waiting(T0 + 11 * SECOND, last_fire_ms=T0 + 10 * SECOND, fired=11)
    paused = paused_state(fired_up_to_10, T0 + 10 * SECOND)
    resumed = resumed_state(spec, paused, T0 + 30 * SECOND)
    assert not resumed.paused and resumed.next_fire_ms == T0 + 11 * SECOND
    assert resumed.updated_ms == T0 + 30 * SECOND
    got = step(spec, resumed, T0 + 30 * SECOND)
    assert got.fire == fired + seconds(30, 31)
    assert got.state.missed == 19 - len(fired)


def test_a_new_schedule_waits_for_its_first_time_after_creation() -> None:
    spec = ScheduleSpec(MessageTemplate("t"), every_ms=60 * SECOND)
    state = new_state(spec, T0 + 7)
    assert state == ScheduleState(
        next_fire_ms=T0 + 7 + 60 * SECOND, anchor_ms=T0 + 7, created_ms=T0 + 7, updated_ms=T0 + 7
    )
    assert plan_due_ms(state, T0) == state.next_fire_ms - LEAD_MS
    cron = ScheduleSpec(MessageTemplate("t"), cron="0 * * * *")
    assert new_state(cron, T0).next_fire_ms == T0 + 3600 * SECOND  # not T0 itself
    over = ScheduleSpec(MessageTemplate("t"), cron="0 * * * *", end_ms=T0 + 1)
    assert new_state(over, T0 + 5).ended


def test_an_update_recomputes_the_next_time_from_now_and_keeps_the_rest() -> None:
    spec = every_second()
    state = waiting(T0 + 11 * SECOND, last_fire_ms=T0 + 10 * SECOND, fired=11, missed=2)
    hourly = ScheduleSpec(MessageTemplate("t"), cron="0 * * * *")
    got = updated_state(hourly, paused_state(state, T0), T0 + 20 * SECOND)
    assert got.next_fire_ms == T0 + 3600 * SECOND
    assert (got.paused, got.fired, got.missed, got.last_fire_ms) == (True, 11, 2, T0 + 10 * SECOND)
    assert got.updated_ms == T0 + 20 * SECOND and got.created_ms == T0
    # an interval keeps its anchor (its phase) unless the new spec gives a start
    slower = ScheduleSpec(MessageTemplate("t"), every_ms=7 * SECOND)
    assert updated_state(slower, state, T0 + 20 * SECOND).next_fire_ms == T0 + 21 * SECOND
    assert updated_state(spec, state, T0 + 5 * SECOND).next_fire_ms == T0 + 11 * SECOND


SPECS = [
    ScheduleSpec(MessageTemplate("t"), every_ms=SECOND, start_ms=T0),
    ScheduleSpec(MessageTemplate("t"), every_ms=7 * SECOND, start_ms=T0 + 3, end_ms=T0 + 900_000),
    ScheduleSpec(MessageTemplate("t"), cron="*/3 * * * * *"),
    ScheduleSpec(MessageTemplate("t"), cron="0,10,11 * * * * *", time_zone="Asia/Kathmandu"),
]


@settings(max_examples=size("DELAYQ_CATCHUP_EXAMPLES", 200, 2000), deadline=None)
@given(
    spec=st.sampled_from(SPECS),
    policy=st.sampled_from(list(CatchUp)),
    window_s=st.integers(1, 60),
    gaps=st.lists(st.integers(0, 40_000), min_size=1, max_size=60),
)
def test_every_nominal_time_is_fired_once_or_counted_missed(
    spec: ScheduleSpec, policy: CatchUp, window_s: int, gaps: list[int]
) -> None:
    """The plan pops at random times (late when the shard was down, early, twice
    at one time); over all its steps the fired times are increasing, each fired
    once, none before it was within the lead; with the missed ones they are
    exactly the schedule's nominal times up to where it waits."""
    spec = dataclasses.replace(spec, catch_up=policy, catch_up_window_ms=window_s * SECOND)
    state = new_state(spec, T0)
    first, now, fired, skipped = state.next_fire_ms, T0, [], 0
    for gap in gaps:
        now += gap
        got = step(spec, state, now)
        assert all(t <= now + LEAD_MS for t in got.fire)
        missed_fired = [t for t in got.fire if t < now]
        if policy is CatchUp.NONE:
            assert missed_fired == []
        if policy is CatchUp.LATEST:
            assert len(missed_fired) <= 1
        assert all(t >= now - window_s * SECOND for t in missed_fired)
        fired += got.fire
        skipped += got.skipped
        state = got.state
    assert fired == sorted(set(fired))
    assert (state.fired, state.missed) == (len(fired), skipped)
    upto = state.next_fire_ms - 1 if not state.ended else (spec.end_ms or now + LEAD_MS)
    nominal = [t for t in firings(spec, first - 1, 3000) if t <= upto]  # (< 2,402 s)
    assert set(fired) <= set(nominal)
    assert len(nominal) == len(fired) + skipped


@pytest.mark.parametrize("policy", list(CatchUp))
def test_times_come_while_this_master_fired_are_late_not_missed(policy: CatchUp) -> None:
    """The master fires since second 5; popped at 20 (its firer busy), the plan
    waiting since 10: seconds 10..20 came while it could fire, so they all fire
    (late), under every policy, and none is missed."""
    spec = every_second(catch_up=policy)
    got = step(spec, waiting(T0 + 10 * SECOND), T0 + 20 * SECOND, since_ms=T0 + 5 * SECOND)
    assert got.fire == seconds(10, 21) and got.skipped == 0
    assert got.state.missed == 0


@pytest.mark.parametrize(
    ("policy", "fired", "skipped"),
    [
        (CatchUp.NONE, seconds(15, 21), 5),
        (CatchUp.LATEST, seconds(14, 21), 4),
        (CatchUp.ALL, seconds(10, 21), 0),
    ],
)
def test_only_times_before_this_master_fired_are_missed(
    policy: CatchUp, fired: list[int], skipped: int
) -> None:
    """The master fires since second 15 (opened or promoted then); popped at 20:
    10..14 came while the shard could not fire: missed, caught up by the policy;
    15..20 are late: fired."""
    spec = every_second(catch_up=policy)
    got = step(spec, waiting(T0 + 10 * SECOND), T0 + 20 * SECOND, since_ms=T0 + 15 * SECOND)
    assert (got.fire, got.skipped) == (fired, skipped)


def test_times_come_while_paused_are_missed_and_after_the_resume_late() -> None:
    """Paused at 10, resumed at 30, popped at 40 (the firer busy): 10..29 came
    while paused (missed: LATEST fires 29), 30..40 after the resume (late: fired)."""
    spec = every_second(catch_up=CatchUp.LATEST)
    paused = paused_state(waiting(T0 + 10 * SECOND, last_fire_ms=T0 + 9 * SECOND), T0 + 10 * SECOND)
    resumed = resumed_state(spec, paused, T0 + 30 * SECOND)
    assert resumed.resumed_ms == T0 + 30 * SECOND
    got = step(spec, resumed, T0 + 40 * SECOND, since_ms=T0)
    assert got.fire == seconds(29, 41) and got.skipped == 19


def test_a_plans_lead_is_fixed_by_its_name_and_spread() -> None:
    names = [f"job-{i}" for i in range(2000)]
    leads = [lead_of(n) for n in names]
    assert leads == [lead_of(n) for n in names]  # the same name, the same lead
    assert all(LEAD_MS <= x < LEAD_MS + LEAD_SPREAD_MS for x in leads)
    assert max(leads) - min(leads) > LEAD_SPREAD_MS * 9 // 10  # spread over it
    assert all(x % LEAD_STEP_MS == 0 for x in leads)  # a herd's plans due together
    assert lead_of("tick") == 9400  # (pinned: a change moves every plan's due time)
