"""A stage's thread loop (``timers.stages.loop``) on a real condition, without an
engine: it survives a failing step, gathers after busy steps, sleeps until the next
due time when idle, holds the lock for every step, and ends when stopped."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from delayq.timers.stages.loop import (
    FAILED_BACKOFF_MAX_S,
    FAILED_BACKOFF_S,
    IDLE_WAIT_S,
    run_stage,
)


class RecordingCondition(threading.Condition):
    """A real condition that records each wait's timeout and returns at once (the
    loop's decisions are what is tested, not the sleeping)."""

    def __init__(self, lock: threading.RLock) -> None:
        super().__init__(lock)
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return False


def _script(
    outcomes: list[bool | Exception], lock: threading.RLock
) -> tuple[Callable[[], bool], list[str]]:
    """A step playing ``outcomes`` in turn (an exception is raised); each play is
    recorded, marked ``unlocked`` if the step ran without the lock."""
    played: list[str] = []

    def step() -> bool:
        outcome = outcomes[len(played)]
        name = type(outcome).__name__ if isinstance(outcome, Exception) else str(outcome)
        played.append(name if lock._is_owned() else "unlocked")  # type: ignore[attr-defined]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return step, played


def _run(
    outcomes: list[bool | Exception],
    *,
    next_ms: Callable[[], int | None] = lambda: None,
    gather_s: float | Callable[[], float] = 0.0,
    idle: Callable[[bool], None] | None = None,
    on_failure: Callable[[], None] | None = None,
) -> tuple[RecordingCondition, list[str]]:
    """Run a stage through ``outcomes`` on a clock whose due time d is d ms away."""
    lock = threading.RLock()
    cv = RecordingCondition(lock)
    step, played = _script(outcomes, lock)
    run_stage(
        cv,
        step,
        stopped=lambda: len(played) == len(outcomes),
        next_ms=next_ms,
        timeout_s=lambda due: due / 1000,
        gather_s=gather_s,
        idle=idle,
        name="link",
        on_failure=on_failure,
    )
    return cv, played


def test_a_failing_step_is_logged_and_retried_after_a_back_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, logger="delayq.engine"):
        cv, played = _run([RuntimeError("disk"), True, False])
    assert played == ["RuntimeError", "True", "False"]  # the loop went on after the failure
    assert cv.waits[0] == FAILED_BACKOFF_S
    failed = [r for r in caplog.records if "stage failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert failed[0].getMessage() == "link stage failed; retrying"


def test_failures_in_a_row_back_off_longer_log_once_and_log_the_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    counted: list[int] = []
    with caplog.at_level(logging.INFO, logger="delayq.engine"):
        cv, played = _run(
            [OSError(28, "No space left on device")] * 6 + [True, False],
            on_failure=lambda: counted.append(1),
        )
    assert played == ["OSError"] * 6 + ["True", "False"]
    assert cv.waits[:6] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert FAILED_BACKOFF_MAX_S == 1.0 and len(counted) == 6
    lines = [(r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert lines == [
        ("link stage failed; retrying", True),  # six failures: one traceback
        ("link stage recovered after 6 failures", False),
    ]


def test_busy_steps_gather_and_an_idle_step_sleeps_until_the_next_due_time() -> None:
    cv, played = _run([True, True, False], gather_s=0.01, next_ms=lambda: 250)
    assert played == ["True", "True", "False"]
    assert cv.waits == [0.01, 0.01, 0.25]


def test_no_gather_after_a_busy_step_when_none_is_asked() -> None:
    gathers = iter([0.0, 0.002])
    cv, _ = _run([True, True], gather_s=lambda: next(gathers))
    assert cv.waits == [0.002]  # the first busy step went straight on to the next


def test_an_idle_wait_is_capped_and_marked_idle_around_it() -> None:
    marks: list[bool] = []
    cv, _ = _run([False, False], next_ms=lambda: 10_000_000, idle=marks.append)
    assert cv.waits == [IDLE_WAIT_S, IDLE_WAIT_S]  # a far due time: look again each second
    assert marks == [True, False, True, False]
    cv, _ = _run([False])  # nothing due at all: the same cap
    assert cv.waits == [IDLE_WAIT_S]


def test_a_stopped_stage_runs_no_step() -> None:
    lock = threading.RLock()
    cv = RecordingCondition(lock)
    step, played = _script([True], lock)
    run_stage(cv, step, stopped=lambda: True, next_ms=lambda: None, timeout_s=float)
    assert played == [] and cv.waits == []
