"""The daylight-saving rules (``recurrence.cronexpr``) over random expressions
and instants near the changes of zones that have them, each against an oracle
built apart from ours:

- a wall-clock expression (minute and hour fixed): croniter walks its local
  times (naive, no zone), and each is placed on the time line by brute force,
  at the first instant whose local time is at or after it (so a skipped time at
  the gap's end, a repeated one at its first occurrence), several landing on one
  instant firing once;
- an elapsed-time expression (minute or hour starting with ``*``): every minute
  of the next two days whose local time matches the fields (croniter's
  expansion of them) fires, and no other."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from delayq.recurrence.calendar import firings
from delayq.recurrence.cronexpr import parse_cron
from delayq.recurrence.spec import MessageTemplate, ScheduleSpec
from tests.recurrence.strategies import expressions
from tests.support.sizes import size

ZONES = ["America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago"]
EXAMPLES = size("DELAYQ_DST_EXAMPLES", 150, 2000)
DAY_S = 86_400


def _changes(zone: str) -> list[int]:
    """The starts (epoch s) of the days, 2025 to 2028, in which ``zone``'s
    offset changes."""
    z = ZoneInfo(zone)
    first = int(datetime(2025, 1, 1, tzinfo=UTC).timestamp())
    days = [first + d * DAY_S for d in range(4 * 366)]
    offset = [datetime.fromtimestamp(s, z).utcoffset() for s in days]
    return [days[i] for i in range(len(days) - 1) if offset[i] != offset[i + 1]]


CHANGES = [(zone, day) for zone in ZONES for day in _changes(zone)]


def near_a_change() -> st.SearchStrategy[tuple[str, int]]:
    """A zone and an instant (ms) from a day and a half before the start of a day
    in which its offset changes to half a day after."""
    return st.tuples(st.sampled_from(CHANGES), st.integers(-3 * DAY_S // 2, DAY_S // 2)).map(
        lambda cs: (cs[0][0], (cs[0][1] + cs[1]) * 1000 + 123)
    )


def _local(second: int, z: ZoneInfo) -> datetime:
    return datetime.fromtimestamp(second, z).replace(tzinfo=None)


def _placed(naive: datetime, z: ZoneInfo) -> int:
    """The first second whose local time is at or after ``naive``, by a scan from
    3 h before its reading at the zone's offset there, a minute at a time, then a
    second at a time."""
    offset = z.utcoffset(naive)
    assert offset is not None
    second = int(naive.replace(tzinfo=UTC).timestamp() - offset.total_seconds()) - 3 * 3600
    assert _local(second, z) < naive
    while _local(second, z) < naive:
        second += 60
    while _local(second - 1, z) >= naive:
        second -= 1
    return second


def _wall_oracle(cron: str, zone: str, after_ms: int, count: int) -> list[int]:
    z = ZoneInfo(zone)
    start = _local(after_ms // 1000, z) - timedelta(days=1)
    walk = croniter(cron, start, second_at_beginning=len(cron.split()) == 6)
    got: list[int] = []
    while len(got) < count:
        t = _placed(walk.get_next(datetime), z) * 1000
        if t > after_ms and (not got or t > got[-1]):
            got.append(t)
    return got


def _spec(cron: str, zone: str) -> ScheduleSpec:
    return ScheduleSpec(MessageTemplate("t"), cron=cron, time_zone=zone)


def _checked(cron: str) -> None:
    try:
        parse_cron(cron)
    except ValueError:
        assume(False)  # a day no month has: refused


@settings(max_examples=EXAMPLES, deadline=None)
@given(cron=expressions(kind="wall"), at=near_a_change())
def test_wall_clock_times_are_placed_by_the_rules(cron: str, at: tuple[str, int]) -> None:
    zone, after_ms = at
    _checked(cron)
    ours = firings(_spec(cron, zone), after_ms, 6)
    assume(len(ours) == 6)
    assert ours == _wall_oracle(cron, zone, after_ms, 6)


def _matches(expanded: list[list[int | str]], local: datetime) -> bool:
    minute, hour, dom, month, dow = expanded
    if not all(f == ["*"] or v in f for f, v in ((minute, local.minute), (hour, local.hour))):
        return False
    if month != ["*"] and local.month not in month:
        return False
    day = dom == ["*"] or local.day in dom
    weekday = dow == ["*"] or (local.weekday() + 1) % 7 in dow
    if dom != ["*"] and dow != ["*"]:
        return day or weekday  # Vixie's OR when both are set
    return day and weekday


@settings(max_examples=EXAMPLES // 2, deadline=None)
@given(cron=expressions(kind="elapsed", seconds=False), at=near_a_change())
def test_elapsed_time_expressions_fire_where_the_local_time_matches(
    cron: str, at: tuple[str, int]
) -> None:
    zone, after_ms = at
    _checked(cron)
    z, horizon = ZoneInfo(zone), after_ms + 2 * DAY_S * 1000
    expanded = croniter(cron).expanded
    first = after_ms // 60_000 * 60_000 + 60_000
    brute = [
        t
        for t in range(first, horizon + 1, 60_000)
        if _matches(expanded, datetime.fromtimestamp(t // 1000, z))
    ]
    ours = [t for t in firings(_spec(cron, zone), after_ms, 2 * 1440 + 1) if t <= horizon]
    assert ours == brute
