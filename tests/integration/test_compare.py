"""``bench.compare --quick`` on tiny sizes: the JSON has every system, workload and
figure, and delayq delivered everything, never early, cancels held. Speed is
never asserted."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from bench.compare import CDF_QUANTILES

from tests.support.servers import ROOT

FIGURES = {
    "schedule_msgs_per_s",
    "lateness_ms_p50",
    "lateness_ms_p99",
    "lateness_ms_max",
    "early_count",
    "rss_mb",
}


def test_compare_quick_shape_and_delayq_correctness(tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.compare",
            "--quick",
            "--systems",  # all but the RocketMQ peer (make bench-rocketmq-smoke runs it)
            "delayq,redis,delayq_engine,rocksdb,heap",
            "--scale",
            "0.05",
            "--json",
            str(out),
            "--plot",
            str(tmp_path / "plots"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    doc = json.loads(out.read_text())
    systems = doc["systems"]
    assert set(systems) == {"delayq", "redis", "delayq_engine", "rocksdb", "heap"}
    for name, workloads in systems.items():
        assert set(workloads) == {"uniform", "burst", "cancel", "far"}, name
        for wl in ("uniform", "burst", "cancel"):
            assert set(workloads[wl]) >= FIGURES, (name, wl)
            assert workloads[wl]["wrong_body"] == 0, (name, wl)  # bodies reach consumers
            cdf = workloads[wl]["lateness_ms_cdf"]  # what the lateness plot draws
            assert len(cdf) == len(CDF_QUANTILES) and cdf == sorted(cdf), (name, wl)
            assert cdf[CDF_QUANTILES.index(0.5)] == workloads[wl]["lateness_ms_p50"]
            assert cdf[-1] == workloads[wl]["lateness_ms_max"], (name, wl)
        assert workloads["cancel"]["not_cancelled"] == 0, name  # each adapter counts its cancels
        far = {"disk_bytes_per_msg", "rss_bytes_per_msg", "restart_s", "schedule_msgs_per_s"}
        assert far <= set(workloads["far"])
    for name in ("delayq", "delayq_engine"):
        for wl in ("uniform", "burst", "cancel"):
            figs = systems[name][wl]
            assert figs["lost"] == 0, (name, wl)
            assert figs["early_count"] == 0, (name, wl)
        assert systems[name]["cancel"]["resurrected"] == 0
        assert systems[name]["far"]["restart_s"] > 0
    assert "delayq vs redis" in run.stdout
    # the machine's pace, timed before and after each system's run
    assert {name: len(runs) for name, runs in doc["loop_ms"].items()} == dict.fromkeys(systems, 1)
    assert all(ms > 0 for runs in doc["loop_ms"].values() for ms in runs[0]), doc["loop_ms"]
    assert len(doc["loop_ms"]["delayq"][0]) == 2
    assert "machine pace: a fixed Python loop took" in run.stdout
    # the goal's verdict is printed (met or not: speed is never asserted); the
    # in-process rows are references with no goal
    assert re.search(r"^goal delayq vs redis: (not )?met \(.* of 12 figures\)", run.stdout, re.M)
    assert "goal delayq_engine" not in run.stdout
    assert {p.name for p in (tmp_path / "plots").iterdir()} >= {"lateness.png"}
