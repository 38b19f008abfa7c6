"""A schedule's nominal times (pure): the instants (epoch ms) its spec names,
within its start and end.

- a cron expression names local times of ``time_zone``; how a daylight-saving
  change places them is ``cronexpr``'s (a skipped local time at the first valid
  instant after the gap, a repeated one at its first occurrence; rhythms of
  elapsed time, ``*/15 * * * *``, on the time line);
- an interval names ``anchor + k * every_ms`` for k >= 0: elapsed time, the same
  in every zone. The anchor is the spec's ``start_ms``, else the one the schedule
  was given at creation (``ScheduleState.anchor_ms``, passed in here).

Times are within ``[start_ms, end_ms]`` (either bound 0: none) and at most
``spec.MAX_TIME_MS`` (the year 9999). Every answer
counts nominal times strictly after a given instant, so a time handed out is
never handed out again by asking after it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from .cronexpr import first_after, instants_after, parse_cron
from .spec import DAY_MS, MAX_TIME_MS, ScheduleSpec
from .zones import zone

__all__ = ["Passed", "firings", "last_before", "next_after", "pass_before"]

_LOOK_BACK_MS = 400 * DAY_MS  # how far ``last_before`` looks for a cron time
_LOOK_BACK_TIMES = 10_000  # and how many cron times it walks over at most


def _after(spec: ScheduleSpec, after_ms: int, anchor_ms: int) -> Iterator[int]:
    """Every nominal time strictly after ``after_ms``, in order, within start/end."""
    after_ms = max(after_ms, spec.start_ms - 1)
    if after_ms >= MAX_TIME_MS:
        return iter(())
    if spec.every_ms:
        origin = spec.start_ms or anchor_ms
        k = max(0, (after_ms - origin) // spec.every_ms + 1)
        times: Iterator[int] = (origin + i * spec.every_ms for i in itertools.count(k))
    else:
        times = instants_after(parse_cron(spec.cron), zone(spec.time_zone), after_ms)
    end = _end(spec)
    return itertools.takewhile(lambda t: t <= end, times)


def _end(spec: ScheduleSpec) -> int:
    """The last time ``spec`` may name."""
    return spec.end_ms or MAX_TIME_MS


def firings(spec: ScheduleSpec, after_ms: int, count: int, anchor_ms: int = 0) -> list[int]:
    """The next ``count`` nominal times strictly after ``after_ms`` (fewer when the
    schedule ends first)."""
    return list(itertools.islice(_after(spec, after_ms, anchor_ms), max(count, 0)))


def next_after(spec: ScheduleSpec, t: int, anchor_ms: int = 0) -> int | None:
    """The first nominal time strictly after ``t``; None when there is none."""
    if spec.every_ms:
        return next(_after(spec, t, anchor_ms), None)
    t = max(t, spec.start_ms - 1)
    if t >= MAX_TIME_MS:
        return None
    got = first_after(parse_cron(spec.cron), zone(spec.time_zone), t)
    return got if got is not None and got <= _end(spec) else None


def last_before(spec: ScheduleSpec, t: int, floor_ms: int, anchor_ms: int = 0) -> int:
    """The last nominal time strictly before ``t`` and at or after ``floor_ms``; 0
    when there is none, or none was found within bounds: a cron expression's is
    looked for in windows back from ``t`` growing fourfold from a second, over
    ``_LOOK_BACK_MS`` and ``_LOOK_BACK_TIMES`` times walked at most (some ms), so
    a call under the shard's lock stays short. The times are those
    ``next_after`` names: ``next_after(last_before(t)) == t`` for a nominal time
    ``t`` whose last before is found."""
    floor_ms = max(floor_ms, spec.start_ms)
    if spec.every_ms:
        origin = spec.start_ms or anchor_ms
        k = (t - 1 - origin) // spec.every_ms
        got = origin + k * spec.every_ms
        return got if k >= 0 and got >= floor_ms else 0
    window, left = 1000, _LOOK_BACK_TIMES
    while window <= _LOOK_BACK_MS and left > 0:
        lo = max(t - window, floor_ms - 1)
        last = 0
        for u in _after(spec, lo, anchor_ms):
            if u >= t:
                break
            if not left:
                return 0  # (a window too dense to walk: not found within bounds)
            last, left = u, left - 1
        if last or lo == floor_ms - 1:
            return last
        window *= 4
    return 0


@dataclass(frozen=True, slots=True)
class Passed:
    """What ``pass_before`` went over: ``count`` nominal times, the last of them
    ``last`` (0 when none), and ``next``, the first not passed (None: the
    schedule ends first)."""

    count: int
    last: int
    next: int | None


def pass_before(
    spec: ScheduleSpec, first: int, before_ms: int, most: int, anchor_ms: int = 0
) -> Passed:
    """From nominal time ``first`` on, go over those before ``before_ms``: at most
    ``most`` of a cron expression's (they are walked one by one), any number of an
    interval's (counted). ``next`` is then before ``before_ms`` only when
    ``most`` stopped the walk."""
    if first >= before_ms:
        return Passed(0, 0, first)
    if spec.every_ms:
        return _pass_interval(spec, first, before_ms, anchor_ms)
    count, last = 1, first
    for t in _after(spec, first, anchor_ms):
        if t >= before_ms or count >= most:
            return Passed(count, last, t)
        count, last = count + 1, t
    return Passed(count, last, None)


def _pass_interval(spec: ScheduleSpec, first: int, before_ms: int, anchor_ms: int) -> Passed:
    every = spec.every_ms
    stop = min(before_ms - 1, _end(spec))
    if stop < first:  # ``first`` is past the end: nothing left
        return Passed(0, 0, None)
    count = (stop - first) // every + 1  # first, first + every, ... <= stop
    last = first + (count - 1) * every
    return Passed(count, last, next_after(spec, last, anchor_ms))
