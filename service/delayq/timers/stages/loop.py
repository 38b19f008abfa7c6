"""How a stage's thread runs its steps: step while there is work, gather between
busy steps, sleep when idle, and survive a failing step.

Invariants:
- the stage's condition (on the engine lock) is held for the whole loop except
  while waiting on it, so a step always runs with the lock held;
- a step that raises is retried after ``FAILED_BACKOFF_S``, doubling with each
  failure in a row up to ``FAILED_BACKOFF_MAX_S``: a stage never dies, and its
  unfinished work stays queued for the retry. A run of failures is logged once
  with its traceback, then a line at most every ``failures.REPORT_EVERY_S``, and
  once more when a step succeeds again (see ``failures``);
- an idle stage sleeps until its next due time (``next_ms``) or ``IDLE_WAIT_S``,
  whichever comes first, or until it is notified;
- ``stopped()`` is read with the lock held before every step.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from .failures import FailureRun, backoff_s

__all__ = ["FAILED_BACKOFF_MAX_S", "FAILED_BACKOFF_S", "IDLE_WAIT_S", "run_stage"]

log = logging.getLogger("delayq.engine")

FAILED_BACKOFF_S = 0.1  # a failed step is retried this much later
FAILED_BACKOFF_MAX_S = 1.0  # ... and after more failures in a row, at most this
IDLE_WAIT_S = 1.0  # an idle stage looks again at least this often


def run_stage(
    cv: threading.Condition,
    step: Callable[[], bool],
    *,
    stopped: Callable[[], bool],
    next_ms: Callable[[], int | None],
    timeout_s: Callable[[int], float],
    gather_s: float | Callable[[], float] = 0.0,
    idle: Callable[[bool], None] | None = None,
    name: str = "a",
    on_failure: Callable[[], None] | None = None,
) -> None:
    """Run ``step`` (True: it did work) until ``stopped()``. After a busy step, wait
    ``gather_s`` (or what it returns) or for a notify, so the next step finds a bigger
    batch. When idle, call ``idle(True)``, sleep on ``cv`` until ``next_ms()`` (None:
    nothing due; ``timeout_s`` turns a due time into seconds), then ``idle(False)``.
    ``name`` names the stage in logs; ``on_failure`` is called (lock held) per failure."""
    gather = gather_s if callable(gather_s) else lambda: gather_s
    failures = FailureRun(log, f"{name} stage")
    with cv:
        while not stopped():
            try:
                busy = step()
            except Exception as exc:  # log, back off, retry
                wait = backoff_s(failures.count + 1, FAILED_BACKOFF_S, FAILED_BACKOFF_MAX_S)
                failures.failed(exc, wait)
                if on_failure:
                    on_failure()
                cv.wait(wait)
                continue
            failures.succeeded()
            if busy:
                if wait := gather():
                    cv.wait(wait)
                continue
            due = next_ms()
            if idle:
                idle(True)
            cv.wait(IDLE_WAIT_S if due is None else min(IDLE_WAIT_S, timeout_s(due)))
            if idle:
                idle(False)
