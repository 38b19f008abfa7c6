"""A pytest plugin: at the end of a run, each suite's wall time and test time.

A suite is a directory under ``tests/`` (``tests/test_*.py`` are ``unit``). Its
wall time runs from the start of its first test to the end of its last
(setup and teardown included), on whichever workers ran them, so suites that ran
side by side overlap; its test time is the sum of its tests' setup, call and
teardown. The table goes with pytest's ``--durations`` (``make test`` asks for
the 30 slowest) to show where a run's time goes.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest


def suite_of(nodeid: str) -> str:
    """``tests/k8s/test_chart.py::x`` -> ``k8s``; ``tests/test_ids.py::x`` -> ``unit``."""
    parts = nodeid.split("::", 1)[0].split("/")
    return parts[1] if len(parts) > 2 else "unit"


@dataclass
class Span:
    tests: int = 0
    first: float = float("inf")
    last: float = 0.0
    busy: float = 0.0

    def add(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.tests += 1
        self.first = min(self.first, report.start)
        self.last = max(self.last, report.stop)
        self.busy += report.duration


class SuiteTimes:
    def __init__(self) -> None:
        self.spans: dict[str, Span] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.start:  # (a report made up by xdist for a crashed worker has none)
            self.spans.setdefault(suite_of(report.nodeid), Span()).add(report)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.spans:
            return
        start = min(s.first for s in self.spans.values())
        tr = terminalreporter
        tr.section("time per suite")
        tr.write_line(f"{'suite':<14}{'tests':>6}{'from':>8}{'to':>8}{'wall':>8}{'test time':>11}")
        for name, s in sorted(self.spans.items(), key=lambda kv: -(kv[1].last - kv[1].first)):
            tr.write_line(
                f"{name:<14}{s.tests:>6}{s.first - start:>7.0f}s{s.last - start:>7.0f}s"
                f"{s.last - s.first:>7.0f}s{s.busy:>10.0f}s"
            )
        total = sum(s.busy for s in self.spans.values())
        end = max(s.last for s in self.spans.values())
        tr.write_line(
            f"{'all':<14}{sum(s.tests for s in self.spans.values()):>6}"
            f"{0:>7.0f}s{end - start:>7.0f}s{end - start:>7.0f}s{total:>10.0f}s"
        )


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        config.pluginmanager.register(SuiteTimes(), "delayq-suite-times")
