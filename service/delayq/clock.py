"""Time source for everything time-dependent in delayq.

This is the only module of the shard's side (engine, timers, delivery, store,
replication, server) that reads the real time (``tests/test_clock_discipline.py``
checks it, with the few real-time measurements it allows). Every component takes
a ``Clock``; tests pass a ``FakeClock`` and advance it, so a year of timers runs
in seconds without sleeping, and a master's lease lapses without waiting for it.

A clock tells two times: the wall clock (``now_ms``: due times, timestamps) and a
monotonic one (``monotonic_s``: leases, liveness, holds and other spans, which a
stepped wall clock must not stretch or cut). Only differences of monotonic times
mean anything, and only between times of the same clock.

Thread-safety: both clocks are safe to share between threads.

``precise_waits`` narrows how late a thread's timed waits may end (Linux timer
slack), for the threads that wait for messages' due times.
"""

from __future__ import annotations

import ctypes
import sys
import threading
import time
from typing import Protocol

__all__ = [
    "FAKE_MONOTONIC_START_S",
    "Clock",
    "FakeClock",
    "ShardClock",
    "SystemClock",
    "precise_waits",
    "timer_slack_ns",
]


FAKE_MONOTONIC_START_S = 1_000
"""Where a ``FakeClock``'s monotonic clock starts (seconds, as since a boot)."""


class Clock(Protocol):
    """Wall-clock milliseconds, monotonic seconds, and a hint for how long a
    waiting thread may block."""

    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""

    def monotonic_s(self) -> float:
        """Seconds on a clock that never goes back (its origin means nothing)."""

    def timeout_s(self, until_ms: int) -> float:
        """Seconds a thread may block (on a condition) waiting for ``until_ms``."""


class SystemClock:
    """The real wall clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_s(self) -> float:
        return time.monotonic()

    def timeout_s(self, until_ms: int) -> float:
        # from the exact time, not the floored ms: a waiter wakes when ``until_ms``
        # begins, not up to a millisecond into it
        return max(0.0, (until_ms * 1_000_000 - time.time_ns()) / 1e9)


class ShardClock(SystemClock):
    """The wall clock, held back by how far it may run ahead of the masters this
    node took over from (``replication.skew``): due times fire against it, so a
    promoted node never delivers before the time its predecessor's clock set.
    The hold only grows; it moves the wall clock only, not the monotonic one."""

    def __init__(self) -> None:
        self._back_ns = 0

    def hold_back(self, ms: int) -> None:
        self._back_ns = max(self._back_ns, ms * 1_000_000)

    @property
    def held_back_ms(self) -> int:
        return self._back_ns // 1_000_000

    def now_ms(self) -> int:
        return (time.time_ns() - self._back_ns) // 1_000_000

    def timeout_s(self, until_ms: int) -> float:
        return max(0.0, (until_ms * 1_000_000 + self._back_ns - time.time_ns()) / 1e9)


class FakeClock:
    """A clock that only moves when told to (``advance``/``set``): its wall clock
    and its monotonic one move together, by the same milliseconds.

    The monotonic clock starts at ``FAKE_MONOTONIC_START_S``, not 0, as a real one
    (seconds since boot) does: a time noted as 0.0 ("never") is then long past.
    Threads that wait on it poll every ``poll_s`` real seconds, because fake
    time can jump at any moment without notifying them.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000, *, poll_s: float = 0.002) -> None:
        self._now = start_ms
        self._mono_ms = FAKE_MONOTONIC_START_S * 1000
        self._poll_s = poll_s
        self._lock = threading.Lock()  # advance() and now_ms() run on different threads

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def monotonic_s(self) -> float:
        with self._lock:
            return self._mono_ms / 1000  # (one rounding: whole ms compare exactly)

    def advance(self, ms: int) -> int:
        """Move time forward by ``ms`` (never backwards) and return the new time."""
        if ms < 0:
            raise ValueError("a FakeClock never goes backwards")
        with self._lock:
            self._now += ms
            self._mono_ms += ms
            return self._now

    def set(self, now_ms: int) -> None:
        with self._lock:
            if now_ms < self._now:
                raise ValueError("a FakeClock never goes backwards")
            self._mono_ms += now_ms - self._now
            self._now = now_ms

    def timeout_s(self, until_ms: int) -> float:
        return 0.0 if self.now_ms() >= until_ms else self._poll_s


# prctl(2) options (linux/prctl.h)
_PR_SET_TIMERSLACK = 29
_PR_GET_TIMERSLACK = 30


def _prctl(option: int, value: int = 0) -> int | None:
    """prctl(option, value) on Linux (its result, -1 on failure); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    result: int = libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0)
    return result


def timer_slack_ns() -> int | None:
    """The calling thread's timer slack in ns (None where it cannot be read)."""
    got = _prctl(_PR_GET_TIMERSLACK)
    return None if got is None or got < 0 else got


def precise_waits(slack_ns: int = 1_000) -> bool:
    """Let the calling thread's timed waits end within ``slack_ns`` of their
    deadline. Linux lets a thread's timers fire up to its *timer slack* late (50 µs
    by default) to batch wake-ups; a thread whose deadline is a message's due time
    wants it small. Threads it starts later inherit it. Returns whether it took
    effect (False off Linux or if the kernel refused)."""
    if slack_ns <= 0:
        raise ValueError("slack_ns must be positive (0 would restore the default)")
    return _prctl(_PR_SET_TIMERSLACK, slack_ns) == 0
