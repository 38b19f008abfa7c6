"""The cron arithmetic (``recurrence.calendar`` over cronsim) against an
independent implementation, croniter: random expressions of 5 and 6 fields
(``strategies``), random instants, in UTC and in zones of a fixed offset (whole,
half and three-quarter hours), where the two must agree exactly on the next
firings. (Zones with daylight saving: ``test_dst_oracle``.)"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from croniter import croniter
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from delayq.recurrence.calendar import firings
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
