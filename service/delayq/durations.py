"""Human durations and times (pure): "250ms", "30s", "5m", "2h", "7d", bare numbers
are milliseconds; ISO-8601 times with a zone for absolute delivery times; and
RocketMQ 4's delay-level list ("1s 5s 10s ... 2h", its ``messageDelayLevel``)."""

from __future__ import annotations

import re
from datetime import datetime

__all__ = [
    "DEFAULT_DELAY_LEVELS",
    "duration_text",
    "parse_delay_levels",
    "parse_duration_ms",
    "parse_time_ms",
]

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
"""RocketMQ 4's default ``messageDelayLevel``: level L is the L-th item."""

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "y": 31_536_000_000}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|y)?\s*")
_LEVEL = re.compile(r"[0-9]+[smhd]")  # RocketMQ's own syntax: a whole number and one unit


def parse_duration_ms(text: str) -> int:
    """Milliseconds in ``text``; ValueError naming the accepted forms otherwise."""
    m = _DURATION.fullmatch(str(text))
    if not m:
        raise ValueError(f"bad duration {text!r}: use a number with ms, s, m, h, d or y (e.g. 30s)")
    return round(float(m.group(1)) * _UNITS[m.group(2) or "ms"])


def duration_text(ms: int) -> str:
    """``ms`` in the largest unit that holds it whole ("2h", "90s", "250ms"): what
    ``parse_duration_ms`` reads back."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def parse_time_ms(text: str) -> int:
    """Epoch ms of an ISO-8601 time with a zone (``2026-12-01T10:00:00Z``) or of a
    bare integer (already epoch ms)."""
    if re.fullmatch(r"\d{10,}", text.strip()):
        return int(text)
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"bad time {text!r}: use ISO-8601 like 2026-12-01T10:00:00Z") from exc
    if when.tzinfo is None:
        raise ValueError(f"time {text!r} needs a zone, e.g. a trailing Z for UTC")
    return round(when.timestamp() * 1000)


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """The delays (ms) of a space-separated level list in RocketMQ's syntax (whole
    numbers with s, m, h or d: ``"1s 5s 10s 30s 1m"``); level L is item L. A
    ValueError names ``delay_levels`` and the bad item; an empty list is refused."""
    items = str(text).split()
    if not items:
        raise ValueError(f"delay_levels: give at least one duration, e.g. {DEFAULT_DELAY_LEVELS!r}")
    for number, item in enumerate(items, 1):
        if not _LEVEL.fullmatch(item):
            raise ValueError(
                f"delay_levels: item {number}, {item!r}, is not a whole number with s, m, h "
                "or d (RocketMQ's syntax, e.g. 30s or 2h)"
            )
    return tuple(parse_duration_ms(item) for item in items)
