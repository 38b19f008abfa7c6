"""Logging a run of failures (``timers.stages.failures``): one traceback per run, then a
line at most every ``every_s``, and one line when it recovers; the back-off doubles
up to its cap."""

from __future__ import annotations

import logging

import pytest

from delayq.timers.stages.failures import FailureRun, backoff_s

LOG = logging.getLogger("delayq.test.failures")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, bool]]:
    """Each record's message and whether it carries a traceback."""
    return [(r.getMessage(), r.exc_info is not None) for r in caplog.records]


def test_a_run_logs_its_first_failure_with_a_traceback_then_a_line_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    run = FailureRun(LOG, "link stage", every_s=30.0, clock=clock)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        for _ in range(50):  # 50 failures within 5 s: only the first is logged
            run.failed(OSError(28, "No space left"), 0.1)
            clock.now += 0.1
        clock.now += 30.0
        run.failed(OSError(28, "No space left"), 1.0)  # half a minute on: a line
        run.failed(OSError(28, "No space left"), 1.0)  # and not again at once
        run.succeeded()
        run.succeeded()  # a success outside a run says nothing
    assert _lines(caplog) == [
        ("link stage failed; retrying", True),
        ("link stage still failing (51 failures in a row): [Errno 28] No space left", False),
        ("link stage recovered after 52 failures", False),
    ]
    assert caplog.records[0].failures == 1  # type: ignore[attr-defined]
    assert run.count == 0


def test_a_new_run_after_a_recovery_logs_its_traceback_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    run = FailureRun(LOG, "checkpoint", clock=Clock())
    with caplog.at_level(logging.INFO, logger=LOG.name):
        run.failed(RuntimeError("one"), 1.0)
        run.succeeded()
        run.failed(RuntimeError("two"), 1.0)
    assert _lines(caplog) == [
        ("checkpoint failed; retrying", True),
        ("checkpoint recovered after 1 failures", False),
        ("checkpoint failed; retrying", True),
    ]


def test_the_back_off_doubles_from_the_first_wait_up_to_its_cap() -> None:
    assert [backoff_s(k, 0.1, 1.0) for k in range(1, 7)] == pytest.approx(
        [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    )
    assert backoff_s(10_000, 0.1, 1.0) == 1.0  # no overflow however long it fails
    assert backoff_s(0, 0.1, 1.0) == pytest.approx(0.1)
