"""Cron expressions (pure): parsed and checked once, walked in a time zone.

An expression has 5 fields (minute, hour, day of month, month, day of week) or 6
with a seconds field first (Quartz, Spring, Temporal order); cronsim does the
field arithmetic (numbers, ``*``, ranges, steps, lists, month and day names,
``L`` and ``LW`` for the last (week)day of the month, ``5L`` for the month's last
Friday, ``MON#2`` for its second Monday). When both day fields are set, a day
matches either (Vixie cron's OR rule); a day field starting with ``*`` (``*``,
``*/2``) makes it AND, as in Vixie and Debian cron.

Walking in a zone follows Debian cron's two kinds of job:

- a *wall-clock* expression (its minute and its hour fields both fixed: not
  starting with ``*``) names local times: they are walked as local wall-clock
  times and each is then placed on the time line. A local time that a
  spring-forward skips is placed at the first valid instant after the gap (the
  change's instant itself, e.g. 03:00 in New York); several skipped local times
  land there once. A local time a fall-back repeats is its first occurrence.
- any other expression (``*/15 * * * *``, ``0 * * * *``) is a rhythm of elapsed
  time: it fires at every instant whose local time it names, so in a skipped
  hour it does not fire, in a repeated hour it fires in both passes.

Both walk local times with cronsim over naive datetimes (pure calendar
arithmetic) and place them on the time line here. cronsim's own walk in a zone
is not used: it steps hours by 3,600 s and so skips the first half hour after
Lord Howe's 30-minute fall-back for ``* */2 * * *`` (found by
``tests/recurrence/test_dst_oracle.py``).

Instants are whole seconds (ms multiples of 1000); the walk yields strictly
increasing instants strictly after its start.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

__all__ = ["MAX_CRON_LEN", "CronExpr", "first_after", "instants_after", "parse_cron"]

MAX_CRON_LEN = 256
"""The longest expression taken (a list of every minute is ~170 characters)."""
_FIELDS = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")
_PROBE = datetime(2000, 1, 1)  # any naive start: parsing needs one


@dataclass(frozen=True, slots=True)
class CronExpr:
    """A checked expression: ``text`` with single spaces, ``fields`` 5 or 6."""

    text: str
    fields: int
    wall_clock: bool
    """Minute and hour both fixed: walked as local times (module docstring)."""


@functools.lru_cache(maxsize=4096)  # a shard's schedules share few expressions
def parse_cron(text: str) -> CronExpr:
    """``text`` checked; ValueError naming the bad field otherwise (its text
    quoted: the message is for the caller's InvalidArgument)."""
    parts = text.split()
    if len(text) > MAX_CRON_LEN:
        raise ValueError(f"is {len(text)} characters; at most {MAX_CRON_LEN}")
    if len(parts) not in (5, 6):
        raise ValueError(
            f"has {len(parts)} fields; give 5 (minute hour day-of-month month day-of-week) "
            "or 6 (second first)"
        )
    try:
        CronSim(" ".join(parts), _PROBE)
    except (CronSimError, ValueError, IndexError) as exc:
        raise ValueError(_problem(parts, str(exc))) from None
    minute, hour = parts[-5], parts[-4]
    wall = not minute.startswith("*") and not hour.startswith("*")
    return CronExpr(" ".join(parts), len(parts), wall)


def _problem(parts: list[str], said: str) -> str:
    """cronsim's "Bad <field>" as which field, quoted."""
    offset = 6 - len(parts)  # a 5-field expression has no seconds field
    for i, name in enumerate(_FIELDS):
        if said.lower() == f"bad {name}" and i >= offset:
            return f"bad {name} field {parts[i - offset]!r}"
    return f"is not a cron expression ({said})"


def instants_after(expr: CronExpr, zone: ZoneInfo, after_ms: int) -> Iterator[int]:
    """The expression's instants (epoch ms) strictly after ``after_ms``, in order,
    each once, as local times of ``zone`` (module docstring); ends when cronsim
    finds none within 50 years."""
    last = after_ms // 1000
    local = datetime.fromtimestamp(last, zone).replace(tzinfo=None)
    if expr.wall_clock or zone.key == "UTC":
        walk = _wall_clock(expr.text, zone, local)
    else:
        walk = _elapsed(expr.text, zone, local - _fall_back_ahead(last, zone))
    for second in walk:
        if second > last:  # a fall-back's second pass, a gap's collapsed times
            last = second
            yield second * 1000


@functools.lru_cache(maxsize=8192)  # many schedules share an expression and a time
def first_after(expr: CronExpr, zone: ZoneInfo, after_ms: int) -> int | None:
    """The first of ``instants_after`` (None: none), remembered: a shard's plans
    of one expression all ask after the same nominal time each period."""
    return next(instants_after(expr, zone, after_ms), None)


def _walk(text: str, start: datetime) -> Iterator[datetime]:
    sim = CronSim(text, start)
    while True:
        try:
            yield next(sim)
        except (StopIteration, OverflowError, ValueError):  # none in 50 years; past 9999
            return


def _wall_clock(text: str, zone: ZoneInfo, local: datetime) -> Iterator[int]:
    """Seconds of the local times the expression names after ``local``, each
    placed on the time line."""
    for naive in _walk(text, local):
        yield _place(naive, zone)


_FOLD_MOST = 3 * 3600  # longer than any fall-back (an hour; Lord Howe's 30 minutes)


def _fall_back_ahead(second: int, zone: ZoneInfo) -> timedelta:
    """How far the local time falls back within the next few hours: a local time
    that far before now may still have its second occurrence ahead."""
    now, later = (
        datetime.fromtimestamp(s, zone).utcoffset() for s in (second, second + _FOLD_MOST)
    )
    assert now is not None and later is not None  # (a ZoneInfo's times have offsets)
    return max(now - later, timedelta(0))


def _elapsed(text: str, zone: ZoneInfo, local: datetime) -> Iterator[int]:
    """Seconds of every instant whose local time the expression names, from local
    time ``local`` on, in order. A repeated local time has two instants; the
    second comes after the local times that follow the first until the repeat,
    so instants wait in a heap until no later local time can come before them
    (every later one's first instant is at or after this one's)."""
    waiting: list[int] = []
    for naive in _walk(text, local):
        first = naive.replace(tzinfo=zone, fold=0)
        if not _exists(first, naive, zone):
            continue  # skipped by a spring-forward
        at = int(first.timestamp())
        heapq.heappush(waiting, at)
        again = int(naive.replace(tzinfo=zone, fold=1).timestamp())
        if again != at:  # repeated by a fall-back
            heapq.heappush(waiting, again)
        while waiting and waiting[0] <= at:
            yield heapq.heappop(waiting)
    while waiting:
        yield heapq.heappop(waiting)


def _exists(aware: datetime, naive: datetime, zone: ZoneInfo) -> bool:
    """Whether local time ``naive`` (``aware``: it in ``zone``) occurs at all."""
    return aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == naive


def _place(naive: datetime, zone: ZoneInfo) -> int:
    """The epoch second of local time ``naive``: its first occurrence, or the end
    of the gap a spring-forward made when it never occurs."""
    first = naive.replace(tzinfo=zone, fold=0)
    if _exists(first, naive, zone):
        return int(first.timestamp())
    return _gap_end(naive, zone)


def _gap_end(naive: datetime, zone: ZoneInfo) -> int:
    """The first second whose local time is at or after ``naive`` (which a gap
    skips): the change's instant. The two readings of ``naive`` (the offsets
    before and after the change) bracket it; bisect between them."""
    a = int(naive.replace(tzinfo=zone, fold=0).timestamp())
    b = int(naive.replace(tzinfo=zone, fold=1).timestamp())
    lo, hi = min(a, b), max(a, b)  # local(lo) < naive <= local(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, zone).replace(tzinfo=None) >= naive:
            hi = mid
        else:
            lo = mid
    return hi
