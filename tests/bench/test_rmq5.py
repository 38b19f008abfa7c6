"""The two systems of ``bench.compare`` that the official RocketMQ 5 Java client drives
(``Bench5.java``): each workload at a small size sends every message once, recalls the
ones it recalls (none of them delivered), delivers the rest once, on time or late but
never early, with their bodies; the figures have the shape the table and the goal read;
``close`` leaves no JVM behind. No timing is asserted.

``delayq_rmq5`` (delayq's RocketMQ port) runs with the suite (~15 s: a JVM and the
client's start). ``rocketmq5_proxy`` (a name server and rocketmq-proxy in local mode:
two JVMs, ~1 min of this machine's two cores, ~100 MB fetched from Maven Central on
first use) runs only when asked, with the RocketMQ peer's smoke:
``make bench-rocketmq-smoke`` (``DELAYQ_ROCKETMQ_SMOKE=1``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil
import pytest
from bench.compare import CDF_QUANTILES, QUICK, run_system
from bench.goal import standings

SIZES = {"uniform": 300, "deliver": 150, "burst": 300}


def _processes_under(path: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(str(path) in part for part in p.info["cmdline"] or ()):
            found.append(p)
    return found


def _check(got: dict[str, Any], tmp_path: Path) -> None:
    assert set(got) == {"uniform", "burst"}
    for workload, figures in got.items():
        for count in ("lost", "wrong_body", "duplicates", "early_count", "resurrected"):
            assert figures[count] == 0, (workload, count)
        assert figures["send_failed"] == figures["not_cancelled"] == 0, workload
        for rate in ("schedule_msgs_per_s", "cancel_msgs_per_s", "deliver_msgs_per_s"):
            assert figures[rate] > 0, (workload, rate)
        assert 0 < figures["send_ack_ms_p50"] <= figures["send_ack_ms_p99"], workload
        assert 0 <= figures["lateness_ms_p50"] <= figures["lateness_ms_p99"], workload
        assert figures["lateness_ms_p99"] <= figures["lateness_ms_max"], workload
        assert len(figures["lateness_ms_cdf"]) == len(CDF_QUANTILES), workload
        assert figures["rss_mb"] > 0, workload
        assert not [k for k in figures if k.startswith("_")], workload
    assert _processes_under(tmp_path) == []


def test_delayq_through_its_rocketmq_port_sends_recalls_and_delivers_each_once(
    tmp_path: Path,
) -> None:
    got = run_system("delayq_rmq5", SIZES, QUICK, tmp_path)
    _check(got, tmp_path)
    # the goal pair reads it: every goal figure of both workloads, against itself
    rows = standings({"systems": {"delayq_rmq5": got, "rocketmq5_proxy": got}})
    assert {(r.workload, r.figure) for r in rows} >= {
        ("uniform", "schedule_msgs_per_s"),
        ("uniform", "cancel_msgs_per_s"),
        ("burst", "lateness_ms_p50"),
        ("burst", "lateness_ms_p99"),
        ("burst", "early_count"),
    }


@pytest.mark.skipif(
    os.environ.get("DELAYQ_ROCKETMQ_SMOKE") != "1",
    reason="the rocketmq-proxy side runs only when asked: make bench-rocketmq-smoke "
    "(DELAYQ_ROCKETMQ_SMOKE=1; fetches ~100 MB from Maven Central once)",
)
def test_rocketmq_proxy_sends_recalls_and_delivers_each_once(tmp_path: Path) -> None:
    got = run_system("rocketmq5_proxy", SIZES, QUICK, tmp_path)
    _check(got, tmp_path)
    assert got["uniform"]["rss_mb"] > 100  # two JVMs
