"""Random cron expressions for the property tests of this suite: 5 fields, or 6
with seconds first, of numbers, ranges, steps and lists.

The day fields are ``*`` or free of a leading ``*``: with ``*/2`` the oracle,
croniter, reads the day-of-month/day-of-week rule differently (Vixie cron,
cronsim: a field starting with ``*`` makes it AND; croniter: only a bare ``*``),
which ``test_calendar_named`` pins for ours. No "a-a" ranges (croniter reads a
day-of-week "6-6" as "*") and no "a/s" (croniter ends it at 6 in the day of
week, cronsim at 7)."""

from __future__ import annotations

from hypothesis import strategies as st


def _item(lo: int, hi: int) -> st.SearchStrategy[str]:
    """A star-free field item: a number, a range, a range with a step."""
    number = st.integers(lo, hi).map(str)
    ranged = st.tuples(st.integers(lo, hi - 1), st.integers(1, hi - lo)).map(
        lambda ab: f"{ab[0]}-{min(ab[0] + ab[1], hi)}"
    )
    stepped = st.tuples(ranged, st.integers(1, hi - lo + 1)).map(lambda rs: f"{rs[0]}/{rs[1]}")
    return st.one_of(number, ranged, stepped)


def field(lo: int, hi: int, stars: bool = True) -> st.SearchStrategy[str]:
    """A field of values ``lo..hi``: ``*``, a star step when ``stars``, or a
    list of star-free items."""
    items = st.lists(_item(lo, hi), min_size=1, max_size=3).map(",".join)
    if not stars:
        return st.one_of(st.just("*"), items)
    steps = st.integers(1, hi - lo + 1).map(lambda s: f"*/{s}")
    return st.one_of(st.just("*"), steps, items)


def fixed(lo: int, hi: int) -> st.SearchStrategy[str]:
    """A field that does not start with ``*``."""
    return st.lists(_item(lo, hi), min_size=1, max_size=3).map(",".join)


@st.composite
def expressions(draw: st.DrawFn, kind: str = "any", seconds: bool = True) -> str:
    """An expression; ``kind`` "wall" has minute and hour fixed (a wall-clock
    expression), "elapsed" has one of them starting with ``*``."""
    minute, hour = draw(field(0, 59)), draw(field(0, 23))
    if kind == "wall":
        minute, hour = draw(fixed(0, 59)), draw(fixed(0, 23))
    elif kind == "elapsed" and not (minute.startswith("*") or hour.startswith("*")):
        minute = "*/" + draw(st.integers(1, 60).map(str))
    fields = [
        minute,
        hour,
        draw(field(1, 31, stars=False)),  # day of month
        draw(field(1, 12)),  # month
        draw(field(0, 6, stars=False)),  # day of week
    ]
    if seconds and draw(st.booleans()):
        fields.insert(0, draw(field(0, 59)))  # seconds first
    return " ".join(fields)
