"""``bench.load`` on two small loads: every server system's points have the figures the
chart draws, delayq keeps up and delivers everything, never early, and the chart is
written. Speed is never asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.servers import ROOT


def test_load_ladder_shape_and_delayq_correctness(tmp_path: Path) -> None:
    out = tmp_path / "load.json"
    run = subprocess.run(
        [sys.executable, "-m", "bench.load", "--systems", "delayq,redis", "--loads", "500,1000",
         "--seconds", "1", "--json", str(out), "--plot", str(tmp_path / "plots")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert set(doc["systems"]) == {"delayq", "redis"}
    for name, points in doc["systems"].items():
        assert 1 <= len(points) <= 2, name
        assert [p["offered_msgs_per_s"] for p in points] == [500, 1000][: len(points)]
        for p in points:
            assert {"reached_msgs_per_s", "lateness_ms_p50", "lateness_ms_p99", "lost"} <= set(p)
            assert p["early_count"] == 0, (name, p)
            kept = p["lost"] == 0 and p["reached_msgs_per_s"] >= 0.95 * p["offered_msgs_per_s"]
            assert p["kept_up"] == kept, (name, p)
    # a light load: delayq keeps up and loses nothing (the ladder then goes on to 1000)
    assert doc["systems"]["delayq"][0]["lost"] == 0
    assert "delayq" in run.stdout and "kept up" in run.stdout
    assert (tmp_path / "plots" / "load_p99.png").stat().st_size > 0


def test_load_refuses_in_process_systems_and_bad_loads() -> None:
    def load(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bench.load", *args], cwd=ROOT, capture_output=True, text=True
        )

    engine = load("--systems", "delayq_engine")
    assert engine.returncode != 0 and "in-process" in engine.stderr
    bad = load("--loads", "1k")
    assert bad.returncode != 0 and "--loads must be integers" in bad.stderr
