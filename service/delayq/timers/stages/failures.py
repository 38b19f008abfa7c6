"""Logging a run of failures of one repeated activity (a stage's step, the
checkpoint) without flooding the log, and how long to back off between tries.

A run starts with the first failure after a success (or after the start): that
failure is logged with its traceback. While the run lasts, at most one line per
``every_s`` says how many tries have failed and what the latest error was. The
first success after a run logs one line: recovered, after how many failures.
A full disk, say, thus logs one traceback, then a line every half minute, not
ten tracebacks a second. The run is timed on the real monotonic clock unless
told otherwise: its tries are paced by real waits (a stage's backoff), whatever
clock the shard runs by, and it is the log's volume over real time it bounds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ...clock import SystemClock

__all__ = ["REPORT_EVERY_S", "FailureRun", "backoff_s"]

REPORT_EVERY_S = 30.0  # while failures go on, a line this often
_REAL = SystemClock()  # a run's default clock (module notes)


def backoff_s(failures: int, first_s: float, most_s: float) -> float:
    """The wait before the next try after ``failures`` failures in a row: ``first_s``
    after the first, doubling with each failure after it, at most ``most_s``."""
    return min(most_s, first_s * 2.0 ** min(max(failures - 1, 0), 30))


class FailureRun:
    """The failures in a row of one activity, ``what`` (e.g. "link stage"), logged
    on ``logger``. Call ``failed`` in the handler of each failure and ``succeeded``
    after each success."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        every_s: float = REPORT_EVERY_S,
        clock: Callable[[], float] = _REAL.monotonic_s,
    ) -> None:
        self._log = logger
        self._what = what
        self._every_s = every_s
        self._clock = clock
        self.count = 0  # failures in the current run (0: not failing)
        self._reported = 0.0  # when the run was last logged

    def failed(self, exc: BaseException, retry_in_s: float) -> None:
        """One more failure (``exc``); the next try comes in ``retry_in_s``."""
        self.count += 1
        now = self._clock()
        extra = {"failures": self.count, "retry_in_s": round(retry_in_s, 3)}
        if self.count == 1:
            self._log.error("%s failed; retrying", self._what, exc_info=exc, extra=extra)
        elif now - self._reported >= self._every_s:
            self._log.error(
                "%s still failing (%d failures in a row): %s",
                self._what,
                self.count,
                exc,
                extra=extra,
            )
        else:
            return
        self._reported = now

    def succeeded(self) -> None:
        """A success: ends a run of failures, if there was one."""
        if self.count:
            self._log.warning(
                "%s recovered after %d failures",
                self._what,
                self.count,
                extra={"failures": self.count},
            )
            self.count = 0
