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
  time, walked on the time line: in a skipped hour it does not fire, in a
  repeated hour it fires in both.

Instants are whole seconds (ms multiples of 1000); the walk yields strictly
increasing instants strictly after its start.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

__all__ = ["MAX_CRON_LEN", "CronExpr", "instants_after", "parse_cron"]

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
    start = datetime.fromtimestamp(after_ms // 1000, zone)
    if expr.wall_clock or zone.key == "UTC":
        walk = _wall_clock(expr.text, zone, start.replace(tzinfo=None))
    else:
        walk = (int(dt.timestamp()) for dt in _walk(expr.text, start))
    last = after_ms // 1000
    for second in walk:
        if second > last:  # a fall-back's second pass, a gap's collapsed times
            last = second
            yield second * 1000


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


def _place(naive: datetime, zone: ZoneInfo) -> int:
    """The epoch second of local time ``naive``: its first occurrence, or the end
    of the gap a spring-forward made when it never occurs."""
    first = naive.replace(tzinfo=zone, fold=0)
    if first.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == naive:
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
