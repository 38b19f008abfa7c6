"""``bench.schedules`` at a smoke size: a real ``delayq serve`` with 50 schedules
firing every 2 s, two rounds received, then a SIGKILL and a restart: the figures
it prints name every firing once, none early, and a recovery time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_schedules_benchmark_counts_every_firing_once(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    args = ["--schedules", "50", "--every", "2", "--rounds", "2", "--json", str(out)]
    run = subprocess.run(
        [sys.executable, "-m", "bench.schedules", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    got = json.loads(out.read_text())
    assert (got["firings"], got["expected"]) == (100, 100)
    assert (got["duplicates"], got["early"]) == (0, 0)
    assert got["client_lateness_ms_p99"] >= got["client_lateness_ms_p50"] >= 0
    assert got["recovery_s"] > 0 and got["rss_mb"] > 0
