"""The engine and end-to-end benchmarks run on tiny sizes and report every figure
they name, with nothing early (correctness only: tests never assert speed). Each
benchmark stops with an error of its own when a phase loses messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench(tmp_path: Path, module: str, *args: str) -> dict[str, float]:
    out = tmp_path / "figures.json"
    cmd = [sys.executable, "-m", module, *args, "--json", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    figures: dict[str, float] = json.loads(out.read_text())
    assert json.loads(done.stdout) == figures, "stdout prints what --json writes"
    return figures


def test_engine_benchmark_reports_every_figure(tmp_path: Path) -> None:
    args = ["--pending", "20000", "--deliver", "5000", "--rate", "500", "--seconds", "2"]
    got = _bench(tmp_path, "bench.engine", *args, "--dir", str(tmp_path))
    rates = ("schedule", "cancel", "deliver", "receive_ack")
    for name in [f"{r}_msgs_per_s" for r in rates] + ["rss_mb_10m_pending"]:
        assert isinstance(got[name], int | float) and got[name] > 0, name
    assert got["early_count"] == 0 and got["scaled_pending"] == 20000
    assert 0 <= got["lateness_ms_p50"] <= got["lateness_ms_p99"] <= got["lateness_ms_max"]
    assert got["reopen_s_10m_pending"] > 0


def test_e2e_benchmark_reports_every_figure(tmp_path: Path) -> None:
    got = _bench(tmp_path, "bench.e2e", "--quick")
    for name in ("schedule_msgs_per_s", "deliver_msgs_per_s", "rtt_ms_p50", "rtt_ms_p99"):
        assert isinstance(got[name], int | float) and got[name] > 0, name
    assert got["early_count"] == 0
    assert got["lateness_ms_p50"] <= got["lateness_ms_p99"] <= got["lateness_ms_max"]
