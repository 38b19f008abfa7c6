"""What being watched costs: a scrape of one node's /metrics, and the hot path
while a real Prometheus scrapes it.

    python -m bench.scrape [--topics 1,100,1000] [--groups 10] [--scrapes 30]
                           [--pairs 3] [--every 5] [--json FILE]

1. ``/metrics`` per size: a ``delayq serve`` with T topics, each with a due message
   received by G consumer groups (so every per-topic and per-group family has T or
   T x G series), then ``--scrapes`` GETs of /metrics one after another: wall ms per
   scrape (median, p90), the answer's bytes and series, and the server's CPU ms per
   scrape.
2. The hot path: ``--pairs`` pairs of ``bench.e2e --quick``, one run with a real
   Prometheus scraping the server every ``--every`` s (``bench.e2e
   --scrape-every``) and one without, the first mover alternating: the ratio
   watched / unwatched of the schedule and deliver rates and of the server's CPU
   per message (median over the pairs, range). ``--pairs 0`` skips it.

Metrics are read at scrape time (``delayq.server.metrics``): the figures say what
that costs the node, at scrape time and between scrapes. Speed is never asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.e2e import CpuMeter
from bench.systems import free_port, spawn_delayq, stop_process
from delayq import Client, Outgoing

__all__ = ["main", "scrape_cost"]


def _populate(address: str, topics: int, groups: int) -> None:
    """``topics`` topics, each with one message received by ``groups`` groups."""
    names = [f"topic-{i:04d}" for i in range(topics)]
    with Client(address) as c:
        for start in range(0, topics, 500):
            out = c.schedule_many(
                [Outgoing(topic=t, body=b"x", delay=0) for t in names[start : start + 500]]
            )
            assert all(o.ok for o in out), [o.error for o in out if not o.ok][:1]
        for t in names:
            for g in range(groups):
                deadline = time.monotonic() + 10
                while not c.receive(t, f"group-{g:02d}", max_messages=1, wait_s=0.5):
                    assert time.monotonic() < deadline, f"{t} never came due"


def scrape_cost(topics: int, groups: int, scrapes: int) -> dict[str, Any]:
    """The /metrics figures of a node with ``topics`` x ``groups`` (see the module)."""
    root = Path(tempfile.mkdtemp(prefix="delayq-scrape-"))
    metrics = f"127.0.0.1:{free_port()}"
    proc, address = spawn_delayq(root / "data", "--metrics-listen", metrics)
    try:
        _populate(address, topics, groups)
        url = f"http://{metrics}/metrics"
        urllib.request.urlopen(url, timeout=30).read()  # warm: the first builds the pools
        cpu = CpuMeter([proc.pid])
        took: list[float] = []
        with cpu:
            for _ in range(scrapes):
                t0 = time.perf_counter()
                with urllib.request.urlopen(url, timeout=30) as resp:
                    body = resp.read()
                took.append((time.perf_counter() - t0) * 1000)
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        took.sort()
        return {
            "topics": topics,
            "groups_per_topic": groups,
            "scrape_ms_p50": round(statistics.median(took), 2),
            "scrape_ms_p90": round(took[int(0.9 * (len(took) - 1))], 2),
            "bytes": len(body),
            "series": series,
            "server_cpu_ms_per_scrape": round(cpu.server_s / scrapes * 1000, 2),
        }
    finally:
        stop_process(proc)
        shutil.rmtree(root, ignore_errors=True)


def _e2e(scrape_every: float) -> dict[str, Any]:
    out = Path(tempfile.mkstemp(prefix="delayq-e2e-", suffix=".json")[1])
    try:
        cmd = [sys.executable, "-m", "bench.e2e", "--quick", "--json", str(out)]
        if scrape_every:
            cmd += ["--scrape-every", str(scrape_every)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        figures: dict[str, Any] = json.loads(out.read_text())
        return figures
    finally:
        out.unlink(missing_ok=True)


PAIRED = (
    "schedule_msgs_per_s",
    "deliver_msgs_per_s",
    "schedule_server_cpu_us_per_msg",
    "deliver_server_cpu_us_per_msg",
    "lateness_ms_p99",
)


def watched_pairs(pairs: int, every: float) -> dict[str, Any]:
    """Ratios watched / unwatched over ``pairs`` pairs of ``bench.e2e --quick``."""
    ratios: dict[str, list[float]] = {k: [] for k in PAIRED}
    scrapes = []
    for i in range(pairs):
        order = (every, 0.0) if i % 2 == 0 else (0.0, every)
        runs = {s: _e2e(s) for s in order}
        watched, alone = runs[every], runs[0.0]
        scrapes.append(watched.get("scrapes", 0))
        for k in PAIRED:
            if alone[k]:
                ratios[k].append(watched[k] / alone[k])
        print(f"pair {i + 1}/{pairs}: " + ", ".join(
            f"{k} {alone[k]} -> {watched[k]}" for k in PAIRED
        ), file=sys.stderr)  # fmt: skip
    return {
        "scrape_every_s": every,
        "pairs": pairs,
        "scrapes_per_watched_run": scrapes,
        **{
            f"{k}_watched_over_alone": {
                "median": round(statistics.median(v), 3),
                "min": round(min(v), 3),
                "max": round(max(v), 3),
            }
            for k, v in ratios.items()
            if v
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.scrape",
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--topics", default="1,100,1000", help="topic counts to measure /metrics at")
    ap.add_argument("--groups", type=int, default=10, help="consumer groups per topic")
    ap.add_argument("--scrapes", type=int, default=30, help="scrapes timed per size")
    ap.add_argument("--pairs", type=int, default=3, help="watched/unwatched e2e pairs (0: none)")
    ap.add_argument("--every", type=float, default=5.0, help="Prometheus' scrape interval, s")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    figures: dict[str, Any] = {"metrics": []}
    for n in (int(x) for x in a.topics.split(",") if x):
        row = scrape_cost(n, a.groups, a.scrapes)
        print(json.dumps(row), file=sys.stderr)
        figures["metrics"].append(row)
    if a.pairs:
        figures["hot_path"] = watched_pairs(a.pairs, a.every)
    print(json.dumps(figures, indent=2))
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
