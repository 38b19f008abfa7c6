"""The engine and end-to-end benchmarks run on tiny sizes and report every figure
they name, with nothing early (correctness only: tests never assert speed). Each
benchmark stops with an error of its own when a phase loses messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def test_grpc_floor_benchmark_reports_both_servers_both_call_shapes(tmp_path: Path) -> None:
    got = _bench(tmp_path, "bench.grpcfloor", "--calls", "20", "--size", "100")
    names = [
        f"{server}_{shape}_{side}_cpu_us"
        for server in ("aio", "threads")
        for shape in ("unary", "stream")
        for side in ("server", "client")
    ]
    assert sorted(got) == sorted(names)
    assert all(got[n] >= 0 for n in names) and got["aio_unary_client_cpu_us"] > 0


def test_grpc_floor_variants_report_each_variant_size_and_turn(tmp_path: Path) -> None:
    variants = "generic/none/asyncio,registered/wrapper/asyncio"
    got: dict[str, Any] = _bench(  # type: ignore[assignment]
        tmp_path, "bench.grpcfloor", "--variants", variants, "--calls", "20", "--repeats", "2",
        "--sizes", "100,300", "--inflight", "4",
    )  # fmt: skip
    rows = got["variants"]
    assert [(r["variant"], r["size"]) for r in rows] == [
        ("generic/none/asyncio", 100),
        ("generic/none/asyncio", 300),
        ("registered/wrapper/asyncio", 100),
        ("registered/wrapper/asyncio", 300),
    ]
    for r in rows:
        assert 0 <= r["server_cpu_us_min"] <= r["server_cpu_us"] <= r["server_cpu_us_max"]
        assert r["protobuf"] in ("upb", "python", "cpp") and r["grpcio"]
        assert 0 <= r["cheaper_turns"] <= 2
    assert rows[0]["cheaper_turns"] == 0, "the first variant is never cheaper than itself"


def test_rocketmq_send_benchmark_reports_each_tree(tmp_path: Path) -> None:
    got: dict[str, Any] = _bench(  # type: ignore[assignment]
        tmp_path, "bench.rmqsend", "--calls", "20", "--pairs", "1", "--inflight", "4"
    )
    [row] = got["trees"]
    assert row["tree"] == str(ROOT) and row["server_cpu_us_per_send"] >= 0
    assert row["cheaper_pairs"] == 0, "the first tree is never cheaper than itself"


def test_scrape_benchmark_counts_every_topic_and_group_series(tmp_path: Path) -> None:
    got: dict[str, Any] = _bench(  # type: ignore[assignment]
        tmp_path, "bench.scrape", "--topics", "1,3", "--groups", "2", "--scrapes", "3",
        "--pairs", "0",
    )  # fmt: skip
    one, three = got["metrics"]
    assert (one["topics"], three["topics"], three["groups_per_topic"]) == (1, 3, 2)
    # per topic: pending + 3 due; per group: 10 one-series families and retries by 5
    # attempt buckets: 2 more topics, 4 more groups
    assert three["series"] - one["series"] == 2 * 4 + 4 * (10 + 5)
    assert all(r["bytes"] > 0 and r["scrape_ms_p50"] > 0 for r in got["metrics"])
    assert "hot_path" not in got


def test_paired_benchmark_alternates_and_cancels_everything(tmp_path: Path) -> None:
    out = tmp_path / "paired.json"
    cmd = [sys.executable, "-m", "bench.paired", "--quick", "--json", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(out.read_text())
    pair = doc["pair"]
    assert pair == ["delayq_engine", "rocksdb"] and doc["size"] == 2000
    assert [t["first"] for t in doc["trials"]] == pair  # the first mover alternates
    for trial in doc["trials"]:
        assert trial["loop_ms"] > 0
        assert set(trial["phases"]) == {"uniform", "burst", "cancel", "far"}
        for phase, by_system in trial["phases"].items():
            assert set(by_system) == set(pair)
            for figures in by_system.values():
                assert figures["scheduled"] == 2000 and figures["schedule_msgs_per_s"] > 0, phase
        for figures in trial["phases"]["cancel"].values():
            assert figures["not_cancelled"] == 0 and figures["cancel_msgs_per_s"] > 0
    assert set(doc["summary"]) == {
        "uniform.schedule_msgs_per_s",
        "burst.schedule_msgs_per_s",
        "cancel.schedule_msgs_per_s",
        "far.schedule_msgs_per_s",
        "cancel.cancel_msgs_per_s",
    }
    assert all(row["all"]["pairs"] == 2 for row in doc["summary"].values())
    assert done.stdout.startswith("delayq_engine / rocksdb: 2 pairs of 2,000 messages")


def test_paired_benchmark_refuses_a_bad_pair() -> None:
    cmd = [sys.executable, "-m", "bench.paired", "--pair", "rocksdb,rocksdb"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--pair: two different systems" in done.stderr


def test_compaction_benchmark_reports_every_figure(tmp_path: Path) -> None:
    got: dict[str, Any] = _bench(tmp_path, "bench.compaction", "--messages", "200")
    for run in ("rolling", "compacted"):
        assert got[run]["delivered"] == 200
        assert got[run]["disk_bytes_per_pending_at_day_180"] > 0
    assert got["compacted"]["blocked"] == got["compacted"]["loaded"] == 200
    assert got["commitlog_bytes_fewer_x"] > 10


def test_push_benchmark_reports_every_figure(tmp_path: Path) -> None:
    got = _bench(tmp_path, "bench.push", "--quick", "--signed")
    for rate in (200, 1000):
        name = f"push_{rate}"
        assert got[f"{name}_per_s"] > 0 and got[f"{name}_early_count"] == 0, got
        assert got[f"{name}_lateness_ms_p50"] <= got[f"{name}_lateness_ms_p99"], got
        assert got[f"{name}_server_cpu_us_per_push"] > 0, got
        assert got[f"{name}_duplicates"] >= 0, got
