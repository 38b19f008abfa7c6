"""The cron arithmetic (``recurrence.calendar`` over cronsim) against an
independent implementation, croniter: random expressions of 5 and 6 fields
(``strategies``), random instants, in UTC and in zones of a fixed offset (whole,
half and three-quarter hours), where the two must agree exactly on the next
firings. (Zones with daylight saving: ``test_dst_oracle``.)"""

from __future__ import annotations

import itertools
from datetime import datetime
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from delayq.recurrence.calendar import firings, last_before
from delayq.recurrence.cronexpr import parse_cron
from delayq.recurrence.spec import MessageTemplate, ScheduleSpec
from tests.recurrence.strategies import expressions
from tests.support.sizes import size

EXAMPLES = size("DELAYQ_CRON_EXAMPLES", 300, 5000)
FIXED_ZONES = ["UTC", "Etc/GMT+5", "Etc/GMT-14", "Asia/Kolkata", "Asia/Kathmandu"]
"""No daylight saving between 2000 and 2040: +0, -5, +14, +5:30, +5:45."""
FIRST_MS = 946_684_800_000  # 2000-01-01
LAST_MS = 2_208_988_800_000  # 2040-01-01
NEXT = 6  # firings compared per example


def _spec(cron: str, zone: str) -> ScheduleSpec:
    return ScheduleSpec(MessageTemplate("t"), cron=cron, time_zone=zone)


def _oracle(cron: str, zone: str, after_ms: int, count: int) -> list[int]:
    start = datetime.fromtimestamp(after_ms // 1000, ZoneInfo(zone))
    it = croniter(cron, start, second_at_beginning=len(cron.split()) == 6)
    return [int(it.get_next(datetime).timestamp() * 1000) for _ in range(count)]


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    cron=expressions(),
    zone=st.sampled_from(FIXED_ZONES),
    after_ms=st.integers(FIRST_MS, LAST_MS),
)
def test_next_firings_agree_with_croniter(cron: str, zone: str, after_ms: int) -> None:
    try:
        parse_cron(cron)
    except ValueError:
        assume(False)  # a day no month has (31 2): refused, as the spec check does
    ours = firings(_spec(cron, zone), after_ms, NEXT)
    assume(len(ours) == NEXT)  # (cronsim gives up after 50 years without a match)
    assert ours == _oracle(cron, zone, after_ms, NEXT)
    assert ours[0] > after_ms and ours == sorted(set(ours))
    assert all(t % 1000 == 0 for t in ours)


@settings(max_examples=EXAMPLES // 3, deadline=None)
@given(cron=expressions(), after_ms=st.integers(FIRST_MS, LAST_MS))
def test_asking_after_a_firing_gives_the_ones_after_it(cron: str, after_ms: int) -> None:
    """The walk is consistent with itself: the firings after the k-th are the
    rest of the list (the plan asks after the last one it fired)."""
    try:
        parse_cron(cron)
    except ValueError:
        assume(False)
    spec = _spec(cron, "Europe/Paris")  # and in a zone with daylight saving
    ours = firings(spec, after_ms, NEXT)
    for k, t in enumerate(ours):
        assert firings(spec, t, NEXT - k - 1) == ours[k + 1 :]


@settings(max_examples=EXAMPLES // 3, deadline=None)
@given(
    cron=expressions(),
    zone=st.sampled_from(["Europe/Paris", "America/New_York", "UTC"]),
    after_ms=st.integers(FIRST_MS, LAST_MS),
)
def test_the_time_before_a_firing_is_the_one_before_it(cron: str, zone: str, after_ms: int) -> None:
    """``last_before`` walks back as ``firings`` walks forward (a cancelled
    firing's schedule takes back its last fired time by it), and finds none
    before the floor."""
    try:
        parse_cron(cron)
    except ValueError:
        assume(False)
    spec = _spec(cron, zone)
    ours = firings(spec, after_ms, 4)
    assume(len(ours) == 4 and ours[-1] - ours[0] < 300 * 86_400_000)
    for a, b in itertools.pairwise(ours):
        assert last_before(spec, b, ours[0]) == a
    assert last_before(spec, ours[0], ours[0]) == 0


@given(
    every_ms=st.integers(1_000, 86_400_000),
    anchor_ms=st.integers(FIRST_MS, LAST_MS),
    k=st.integers(1, 1000),
)
def test_an_intervals_time_before_a_firing(every_ms: int, anchor_ms: int, k: int) -> None:
    spec = ScheduleSpec(MessageTemplate("t"), every_ms=every_ms)
    t = anchor_ms + k * every_ms
    assert last_before(spec, t, anchor_ms, anchor_ms) == t - every_ms
    assert last_before(spec, t, t - every_ms + 1, anchor_ms) == 0


def test_the_time_before_is_looked_for_within_bounds() -> None:
    """Every second of January, asked before the next 1 January: the window that
    reaches back to the last January holds millions of times; ``last_before``
    gives up (0) instead of walking them, and finds a near one at once."""
    jan = _spec("* * * * 1 *", "UTC")
    next_jan = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    assert last_before(jan, next_jan, 0) == 0
    assert last_before(jan, next_jan + 1_000, 0) == next_jan
    hourly = _spec("0 * * * *", "Europe/Paris")
    assert last_before(hourly, next_jan, 0) == next_jan - 3_600_000
