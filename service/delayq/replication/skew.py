"""How far this node's wall clock may run ahead of its master's (pure): what a
replica learns from the master's clock stamped on each chunk of its stream.

A chunk stamped ``sent_ms`` on the master's (shard) clock arrives at ``got_ms`` on
this node's: ``got_ms - sent_ms`` is the clocks' offset plus the transit time,
never less than the offset. So the least of it over the recent chunks is an upper
bound on how far this clock runs ahead. A replica promoted holds its clock back
by that much (``clock.ShardClock.hold_back``): it then fires a message no earlier
than the clock of the master that accepted it said it was due (late by the
transit time at most). A clock that runs behind gives a bound <= 0: nothing to
hold back (it delivers late, never early).

Invariants: only chunks of the last ``WINDOW_S`` count (clocks drift, and a
stepped clock is forgotten); with none, the bound is 0.
"""

from __future__ import annotations

import threading
from collections import deque

__all__ = ["WINDOW_S", "ClockSkew"]

WINDOW_S = 30.0


class ClockSkew:
    """Thread-safe: the follower loop observes, a promotion reads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: deque[tuple[float, int]] = deque()  # (monotonic s, got - sent)

    def observe(self, sent_ms: int, got_ms: int, at_s: float) -> None:
        """A chunk stamped ``sent_ms`` by the master came at ``got_ms`` (this node's
        wall clock), at ``at_s`` on its monotonic clock."""
        if sent_ms <= 0:
            return  # (a master that stamps nothing)
        with self._lock:
            self._seen.append((at_s, got_ms - sent_ms))
            self._forget(at_s)

    def ahead_ms(self, now_s: float) -> int:
        """How far this clock may run ahead of the master's (>= 0)."""
        with self._lock:
            self._forget(now_s)
            return max(0, min((d for _, d in self._seen), default=0))

    def _forget(self, now_s: float) -> None:
        while self._seen and self._seen[0][0] < now_s - WINDOW_S:
            self._seen.popleft()
