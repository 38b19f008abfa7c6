"""``bench.schedules_engine`` runs and reports what it says: a few schedules
firing every second for a few seconds, each nominal time received once, none
early, every figure there."""

from __future__ import annotations

from pathlib import Path

from bench.schedules_engine import run


def test_a_small_run_reports_every_figure(tmp_path: Path) -> None:
    got = run(20, 0.05, False, tmp_path / "data", every_ms=1000)
    assert got["firings"] > 0 and got["distinct"] == got["firings"]
    assert got["early"] == 0
    for name in ("create_s", "write_late_p99_ms", "deliver_late_p99_ms", "cpu_s", "rss_mb"):
        assert name in got
    assert got["list_ms"] >= 0 and got["reopen_s"] >= 0
