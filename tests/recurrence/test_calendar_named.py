"""Named cases of a schedule's nominal times (``recurrence.calendar``): the
daylight-saving changes of America/New_York, Europe/London and
Australia/Lord_Howe (a 30-minute change) in both directions, for wall-clock
expressions (a skipped local time fires once at the end of the gap, a repeated
one once, at its first occurrence) and elapsed-time ones (evenly spaced through
both changes); 29 February, the last day of the month, both day fields set,
seconds, and intervals with a start and an end. The expected instants are
written in UTC, worked out by hand from the zones' rules."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from delayq.recurrence.calendar import firings, next_after
from delayq.recurrence.spec import MAX_TIME_MS, MessageTemplate, ScheduleSpec


def ms(*parts: int) -> int:
    """Epoch ms of a UTC time (year, month, day, hour, minute, second)."""
    return int(datetime(*parts, tzinfo=UTC).timestamp()) * 1000  # type: ignore[misc]


def utc(t: int) -> datetime:
    return datetime.fromtimestamp(t / 1000, UTC)


def cron(expr: str, zone: str = "UTC", **kw: int) -> ScheduleSpec:
    return ScheduleSpec(MessageTemplate("t"), cron=expr, time_zone=zone, **kw)


def every(every_ms: int, **kw: int) -> ScheduleSpec:
    return ScheduleSpec(MessageTemplate("t"), every_ms=every_ms, **kw)


# New York, 2026: EST (-5) to EDT (-4) on 8 March at 02:00 local (07:00Z);
# back on 1 November at 02:00 EDT (06:00Z), 01:00-02:00 local twice.
# London, 2026: GMT to BST on 29 March at 01:00 GMT (01:00Z); back on 25 October
# at 02:00 BST (01:00Z), 01:00-02:00 local twice.
# Lord Howe, 2026: +10:30 to +11 on 4 October at 02:00 local (3 Oct 15:30Z),
# 02:00-02:30 skipped; back on 5 April at 02:00 +11 (4 Apr 15:00Z), 01:30-02:00
# local twice.
WALL_CLOCK = [
    pytest.param(  # a skipped local time fires once, when the gap ends (03:00 EDT)
        "30 2 * * *",
        "America/New_York",
        ms(2026, 3, 7),
        [ms(2026, 3, 7, 7, 30), ms(2026, 3, 8, 7, 0), ms(2026, 3, 9, 6, 30)],
        id="new-york-spring-forward",
    ),
    pytest.param(  # several skipped times and the gap's end itself: once
        "0,30 2,3 * * *",
        "America/New_York",
        ms(2026, 3, 8),
        [ms(2026, 3, 8, 7, 0), ms(2026, 3, 8, 7, 30), ms(2026, 3, 9, 6, 0)],
        id="new-york-spring-forward-several",
    ),
    pytest.param(  # a repeated local time fires once, at its first occurrence (EDT)
        "30 1 * * *",
        "America/New_York",
        ms(2026, 10, 31, 12),
        [ms(2026, 11, 1, 5, 30), ms(2026, 11, 2, 6, 30)],
        id="new-york-fall-back",
    ),
    pytest.param(  # with seconds: the same rules
        "15 30 2 * * *",
        "America/New_York",
        ms(2026, 3, 8),
        [ms(2026, 3, 8, 7, 0), ms(2026, 3, 9, 6, 30, 15)],
        id="new-york-spring-forward-seconds",
    ),
    pytest.param(
        "15 30 1 * * *",
        "America/New_York",
        ms(2026, 11, 1),
        [ms(2026, 11, 1, 5, 30, 15), ms(2026, 11, 2, 6, 30, 15)],
        id="new-york-fall-back-seconds",
    ),
    pytest.param(
        "30 1 * * *",
        "Europe/London",
        ms(2026, 3, 28, 12),
        [ms(2026, 3, 29, 1, 0), ms(2026, 3, 30, 0, 30)],
        id="london-spring-forward",
    ),
    pytest.param(
        "30 1 * * *",
        "Europe/London",
        ms(2026, 10, 24, 12),
        [ms(2026, 10, 25, 0, 30), ms(2026, 10, 26, 1, 30)],
        id="london-fall-back",
    ),
    pytest.param(  # 02:15 is in the 30-minute gap: 02:30 +11
        "15 2 * * *",
        "Australia/Lord_Howe",
        ms(2026, 10, 2, 12),
        [ms(2026, 10, 2, 15, 45), ms(2026, 10, 3, 15, 30), ms(2026, 10, 4, 15, 15)],
        id="lord-howe-spring-forward",
    ),
    pytest.param(  # 01:45 occurs at +11 then at +10:30: the first only
        "45 1 * * *",
        "Australia/Lord_Howe",
        ms(2026, 4, 3, 12),
        [ms(2026, 4, 3, 14, 45), ms(2026, 4, 4, 14, 45), ms(2026, 4, 5, 15, 15)],
        id="lord-howe-fall-back",
    ),
]


@pytest.mark.parametrize(("expr", "zone", "after", "expected"), WALL_CLOCK)
def test_wall_clock_times_across_daylight_saving(
    expr: str, zone: str, after: int, expected: list[int]
) -> None:
    got = firings(cron(expr, zone), after, len(expected))
    assert [utc(t) for t in got] == [utc(t) for t in expected]


ELAPSED = [
    pytest.param("0 * * * *", "America/New_York", ms(2026, 3, 8, 3), 3_600_000, id="ny-spring"),
    pytest.param("0 * * * *", "America/New_York", ms(2026, 11, 1, 3), 3_600_000, id="ny-fall"),
    pytest.param("*/30 * * * *", "Europe/London", ms(2026, 3, 28, 22), 1_800_000, id="london"),
    pytest.param("*/30 * * * *", "Europe/London", ms(2026, 10, 24, 22), 1_800_000, id="ldn-fall"),
    pytest.param("*/15 * * * *", "Australia/Lord_Howe", ms(2026, 10, 3, 13), 900_000, id="lhi"),
    pytest.param("*/15 * * * *", "Australia/Lord_Howe", ms(2026, 4, 4, 13), 900_000, id="lhi-f"),
    pytest.param("0 */5 * * * *", "America/New_York", ms(2026, 11, 1, 5), 300_000, id="seconds"),
]


@pytest.mark.parametrize(("expr", "zone", "after", "period"), ELAPSED)
def test_elapsed_time_expressions_stay_evenly_spaced(
    expr: str, zone: str, after: int, period: int
) -> None:
    """Minute or hour starting with ``*``: a rhythm of elapsed time, through the
    change (none in the skipped hour, both passes of the repeated one)."""
    got = firings(cron(expr, zone), after, 40)  # 10 h of hours, 4 of quarters
    assert {b - a for a, b in itertools.pairwise(got)} == {period}
    assert got[0] > after and got[0] - after <= period


def test_a_repeated_hour_fires_twice_for_an_hourly_expression() -> None:
    """01:00 New York on 1 November 2026 is two instants: "0 * * * *" fires at
    both, "0 1 * * *" (a wall-clock time) at the first only."""
    day = ms(2026, 11, 1, 4)
    assert firings(cron("0 * * * *", "America/New_York"), day, 3) == [
        ms(2026, 11, 1, 5),  # 01:00 EDT
        ms(2026, 11, 1, 6),  # 01:00 EST
        ms(2026, 11, 1, 7),  # 02:00 EST
    ]
    assert firings(cron("0 1 * * *", "America/New_York"), day, 2) == [
        ms(2026, 11, 1, 5),
        ms(2026, 11, 2, 6),
    ]


def test_asking_after_the_first_pass_of_a_repeated_time_gives_the_next_day() -> None:
    """A plan that fired 01:30 EDT asks after it, and after the second 01:30
    (EST) too: neither gives the second occurrence."""
    spec = cron("30 1 * * *", "America/New_York")
    first, second = ms(2026, 11, 1, 5, 30), ms(2026, 11, 1, 6, 30)
    assert next_after(spec, first) == ms(2026, 11, 2, 6, 30)
    assert next_after(spec, first + 10 * 60_000) == ms(2026, 11, 2, 6, 30)
    assert next_after(spec, second) == ms(2026, 11, 2, 6, 30)


def test_29_february_fires_in_leap_years_only() -> None:
    got = firings(cron("0 0 29 2 *"), ms(2025, 1, 1), 4)
    assert got == [ms(2028, 2, 29), ms(2032, 2, 29), ms(2036, 2, 29), ms(2040, 2, 29)]
    # 2100 is not a leap year (divisible by 100, not by 400); 2400 is
    assert firings(cron("0 0 29 2 *"), ms(2097, 1, 1), 1) == [ms(2104, 2, 29)]


def test_last_day_of_the_month() -> None:
    got = firings(cron("0 12 L * *"), ms(2027, 12, 31, 13), 5)
    assert got == [
        ms(2028, 1, 31, 12),
        ms(2028, 2, 29, 12),  # a leap year
        ms(2028, 3, 31, 12),
        ms(2028, 4, 30, 12),
        ms(2028, 5, 31, 12),
    ]
    assert firings(cron("0 12 L 2 *"), ms(2026, 1, 1), 1) == [ms(2026, 2, 28, 12)]


def test_last_weekday_of_the_month() -> None:
    """``5L``: the month's last Friday."""
    got = firings(cron("0 9 * * 5L", "Europe/London"), ms(2026, 1, 1), 3)
    assert got == [ms(2026, 1, 30, 9), ms(2026, 2, 27, 9), ms(2026, 3, 27, 9)]


def test_both_day_fields_set_match_either() -> None:
    """Vixie cron's rule: "0 0 13 * 5" fires on every 13th and every Friday."""
    got = firings(cron("0 0 13 * 5"), ms(2026, 1, 1), 30)
    days = [utc(t) for t in got]
    assert all(d.day == 13 or d.weekday() == 4 for d in days)
    fridays_and_13ths = [
        d
        for d in (utc(ms(2026, 1, 1) + i * 86_400_000) for i in range(400))
        if d.day == 13 or d.weekday() == 4
    ]
    assert days == fridays_and_13ths[:30]
    assert utc(ms(2026, 5, 13)) in days  # a Wednesday, there as a 13th


def test_a_day_field_starting_with_a_star_makes_both_needed() -> None:
    """Vixie/Debian: "*/2" in the day of month (odd days) with Friday set: odd
    Fridays only."""
    got = firings(cron("0 0 */2 * 5"), ms(2026, 1, 1), 10)
    assert all(utc(t).day % 2 == 1 and utc(t).weekday() == 4 for t in got)
    assert utc(got[0]) == utc(ms(2026, 1, 9))


def test_a_seconds_field_comes_first() -> None:
    got = firings(cron("*/20 * * * * *"), ms(2026, 1, 1) + 5_500, 4)
    assert got == [ms(2026, 1, 1, 0, 0, s) for s in (20, 40)] + [
        ms(2026, 1, 1, 0, 1, s) for s in (0, 20)
    ]


def test_cron_within_start_and_end() -> None:
    spec = cron("0 * * * *", start_ms=ms(2026, 1, 1, 10, 30), end_ms=ms(2026, 1, 1, 13))
    assert firings(spec, 0, 10) == [ms(2026, 1, 1, h) for h in (11, 12, 13)]
    assert next_after(spec, ms(2026, 1, 1, 13)) is None


def test_an_interval_is_anchored_at_its_start() -> None:
    start = ms(2026, 1, 1) + 250
    spec = every(10_000, start_ms=start, end_ms=start + 35_000)
    assert firings(spec, 0, 10) == [start + k * 10_000 for k in range(4)]
    assert firings(spec, start, 10) == [start + k * 10_000 for k in range(1, 4)]
    assert firings(spec, start + 15_000, 1) == [start + 20_000]
    assert next_after(spec, start + 30_000) is None


def test_an_interval_without_a_start_is_anchored_where_it_is_told() -> None:
    """(The schedule's anchor: its creation.) Zones do not move it."""
    anchor = ms(2026, 3, 8, 6, 30) + 7
    ny = ScheduleSpec(MessageTemplate("t"), every_ms=3_600_000, time_zone="America/New_York")
    assert firings(ny, anchor, 3, anchor) == [anchor + k * 3_600_000 for k in (1, 2, 3)]
    assert firings(ny, anchor - 1, 1, anchor) == [anchor]


def test_last_weekday_and_nth_weekday_of_the_month() -> None:
    """``LW``: the last Monday-to-Friday day (31 January 2026 is a Saturday);
    ``MON#2``: the second Monday."""
    assert firings(cron("0 0 LW * *"), ms(2026, 1, 1), 2) == [ms(2026, 1, 30), ms(2026, 2, 27)]
    assert firings(cron("0 0 * * MON#2"), ms(2026, 1, 1), 2) == [ms(2026, 1, 12), ms(2026, 2, 9)]


def test_a_start_and_step_runs_to_the_fields_end() -> None:
    """``a/s`` runs to the field's largest value: in the day of week that is 7,
    Sunday, so ``1/2`` is Monday, Wednesday, Friday and Sunday."""
    got = firings(cron("0 0 * * 1/2"), ms(2026, 1, 5), 4)  # from Monday 5 January
    assert [utc(t).strftime("%a") for t in got] == ["Wed", "Fri", "Sun", "Mon"]
    assert firings(cron("50/5 * * * *"), ms(2026, 1, 1), 3) == [
        ms(2026, 1, 1, 0, 50),
        ms(2026, 1, 1, 0, 55),
        ms(2026, 1, 1, 1, 50),
    ]


def test_the_half_hour_after_lord_howes_fall_back_is_not_skipped() -> None:
    """Lord Howe falls back from 02:00 +11 to 01:30 +10:30 (5 April 2026; 4 April
    15:00Z);
    "* */2 * * *" fires every minute of even hours, so from 02:00 +10:30 (15:30Z)
    on. (cronsim's own walk in a zone stepped hours by 3,600 s and went on at
    02:30.)"""
    got = firings(cron("* */2 * * *", "Australia/Lord_Howe"), ms(2026, 4, 4, 14), 2)
    assert got == [ms(2026, 4, 4, 15, 30), ms(2026, 4, 4, 15, 31)]


@pytest.mark.parametrize("zone", ["UTC", "Etc/GMT-14", "Etc/GMT+12", "Europe/Paris"])
@pytest.mark.parametrize("expr", ["* * * * *", "0 0 * * *", "* * * * * *"])
def test_times_stop_at_the_start_of_the_year_9999_in_every_zone(zone: str, expr: str) -> None:
    """(A local time a day past it would not fit a ``datetime``.)"""
    spec = cron(expr, zone, start_ms=MAX_TIME_MS - 120_000)
    got = firings(spec, 0, 1000)
    assert all(t <= MAX_TIME_MS for t in got)
    if expr != "0 0 * * *":  # (midnight there is 9999 in UTC only)
        assert got[-1] == MAX_TIME_MS
    assert firings(spec, MAX_TIME_MS, 5) == [] and next_after(spec, MAX_TIME_MS) is None
    interval = every(1000, start_ms=MAX_TIME_MS - 2000)
    assert firings(interval, 0, 10) == [MAX_TIME_MS - 2000, MAX_TIME_MS - 1000, MAX_TIME_MS]
