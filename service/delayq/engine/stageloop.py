"""How a stage's thread runs its steps: step while there is work, gather between
busy steps, sleep when idle, and survive a failing step.

Invariants:
- the stage's condition (on the engine lock) is held for the whole loop except
  while waiting on it, so a step always runs with the lock held;
- a step that raises is logged and retried after ``FAILED_BACKOFF_S``: a stage never
  dies silently, and its unfinished work stays queued for the retry;
- an idle stage sleeps until its next due time (``next_ms``) or ``IDLE_WAIT_S``,
  whichever comes first, or until it is notified;
- ``stopped()`` is read with the lock held before every step.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["FAILED_BACKOFF_S", "IDLE_WAIT_S", "run_stage"]

log = logging.getLogger("delayq.engine")

FAILED_BACKOFF_S = 0.1  # a failed step is retried this much later
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
) -> None:
    """Run ``step`` (True: it did work) until ``stopped()``. After a busy step, wait
    ``gather_s`` (or what it returns) or for a notify, so the next step finds a bigger
    batch. When idle, call ``idle(True)``, sleep on ``cv`` until ``next_ms()`` (None:
    nothing due; ``timeout_s`` turns a due time into seconds), then ``idle(False)``."""
    gather = gather_s if callable(gather_s) else lambda: gather_s
    with cv:
        while not stopped():
            try:
                if step():
                    if wait := gather():
                        cv.wait(wait)
                    continue
            except Exception:  # log, back off, retry
                log.exception("stage failed; retrying its unfinished work")
                cv.wait(FAILED_BACKOFF_S)
                continue
            due = next_ms()
            if idle:
                idle(True)
            cv.wait(IDLE_WAIT_S if due is None else min(IDLE_WAIT_S, timeout_s(due)))
            if idle:
                idle(False)
