"""Human durations and times (pure): "250ms", "30s", "5m", "2h", "7d", bare numbers
are milliseconds; ISO-8601 times with a zone for absolute delivery times."""

from __future__ import annotations

import re
from datetime import datetime

__all__ = ["parse_duration_ms", "parse_time_ms"]

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "y": 31_536_000_000}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|y)?\s*")


def parse_duration_ms(text: str) -> int:
    """Milliseconds in ``text``; ValueError naming the accepted forms otherwise."""
    m = _DURATION.fullmatch(str(text))
    if not m:
        raise ValueError(f"bad duration {text!r}: use a number with ms, s, m, h, d or y (e.g. 30s)")
    return round(float(m.group(1)) * _UNITS[m.group(2) or "ms"])


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
