"""IANA time zones by name (pure but for reading the zone database once a name):
the standard library's ``zoneinfo``, over the system's database or the ``tzdata``
package where the system has none."""

from __future__ import annotations

import functools
from zoneinfo import ZoneInfo, available_timezones

__all__ = ["MAX_ZONE_LEN", "zone"]

MAX_ZONE_LEN = 64
"""Longer than any IANA name (the longest is ~32 characters)."""


@functools.cache  # the database's names, listed once (a directory walk)
def _names() -> frozenset[str]:
    return frozenset(available_timezones()) | {"UTC"}


@functools.lru_cache(maxsize=1024)  # a name is judged and loaded once
def zone(name: str) -> ZoneInfo:
    """The zone ``name`` ("Europe/London", "UTC"); ValueError when the database has
    no such zone (names are case-sensitive, as IANA's)."""
    if len(name) > MAX_ZONE_LEN or name not in _names():
        raise ValueError(f"{name[:MAX_ZONE_LEN]!r} is not an IANA time zone (e.g. Europe/London)")
    return ZoneInfo(name)
