"""The dashboard's key panels, drawn from a real run's Prometheus answers for
``docs/operations.md`` (Grafana itself does not run here).

    python scripts/ops_figures.py [--seconds 150] [--out docs/img/ops-dashboard.svg]

Runs a 3-shard ``delayq cluster up`` (two nodes a shard, sync replication), a
real Prometheus scraping it every second (``bench.prometheus``, the supervisor's
``prometheus-targets.json``), the queue workload (``bench.queuecheck``) and a
consumer group that receives without acking from a third of the way on, SIGKILLs
shard 1's master half-way through, then asks Prometheus for each panel's query
over the run (``query_range``, the dashboard's own expressions with every
variable "all") and plots them, the kill marked. Prints the panels' titles and
the times of the run.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.prometheus import PrometheusProcess  # noqa: E402
from bench.queuecheck import LazyGroup, QueueLoad  # noqa: E402
from tests.support.cluster import LocalCluster  # noqa: E402

DASHBOARD = ROOT / "charts/delayq/dashboards/delayq.json"
PANELS = (
    "Scheduled per second by shard",
    "Delivered per second by shard",
    "Lateness p50 and p99",
    "Delivering masters per shard (must be 1)",
    "Oldest unacked message age by group",
    "Request latency p99 by method",
)


def _queries() -> dict[str, list[tuple[str, str]]]:
    """Panel title -> [(expr with variables "all", legend format)]."""
    out: dict[str, list[tuple[str, str]]] = {}

    def walk(panels: list[dict[str, Any]]) -> None:
        for p in panels:
            walk(p.get("panels", []))
            out[p["title"]] = [
                (
                    re.sub(
                        r"\$\{?(\w+)\}?",
                        ".*",
                        re.sub(r"\$__rate_interval\b", "10s", t["expr"]),
                    ),
                    t.get("legendFormat", ""),
                )
                for t in p.get("targets", [])
                if t.get("expr")
            ]

    walk(json.loads(DASHBOARD.read_text())["panels"])
    return out


def _legend(fmt: str, labels: dict[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=150)
    ap.add_argument("--out", type=Path, default=ROOT / "docs/img/ops-dashboard.svg")
    ap.add_argument("--preview", type=Path, help="also write a small PNG there, to look at")
    a = ap.parse_args()
    queries = _queries()
    root = Path(tempfile.mkdtemp(prefix="delayq-ops-"))
    args = ("--replication", "sync", "--min-insync", "2")
    with LocalCluster(root / "c", shards=3, replicas=2, args=args) as c:
        for s in range(3):
            c.wait_insync(s, 2)
        targets = c.dir / "prometheus-targets.json"
        with PrometheusProcess(root / "prom", targets=targets) as prom:
            prom.wait_targets_up(6)
            load = QueueLoad(c.address(0), batch=20, pause_s=0.02).start()
            lazy = LazyGroup(c.address(0), load.topic).start()
            t0 = time.time()
            try:
                time.sleep(a.seconds / 3)
                lazy.acking = False  # its oldest unacked message ages from here
                time.sleep(a.seconds / 2 - a.seconds / 3)
                master = int(str(c.record(1)["master"]).rpartition("-")[2])
                c.kill(1, node=master, sig=signal.SIGKILL)
                killed = time.time()
                time.sleep(a.seconds / 2)
            finally:
                lazy.stop()
                load.stop()
            t1 = time.time()
            series = {
                title: [
                    (legend, r["metric"], r["values"])
                    for expr, legend in queries[title]
                    for r in prom.api(
                        "query_range", query=expr, start=str(t0), end=str(t1), step="2"
                    )["result"]
                ]
                for title in PANELS
            }
    fig, axes = plt.subplots(3, 2, figsize=(12, 10), constrained_layout=True)
    for ax, title in zip(axes.flat, PANELS, strict=True):
        for legend, labels, values in series[title]:
            xs = [float(t) - t0 for t, _ in values]
            ys = [float(v) for _, v in values]
            ax.plot(xs, ys, label=_legend(legend, labels) or None, linewidth=1.2)
        ax.axvline(killed - t0, color="grey", linestyle=":", linewidth=1)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("seconds (dotted: shard 1's master SIGKILLed)", fontsize=8)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(
        "delayq dashboard panels: 3 shards x 2 nodes (sync), queue workload, "
        "a group that stops acking, one master killed",
        fontsize=11,
    )
    a.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(a.out, format=a.out.suffix.lstrip(".") or "svg")
    if a.preview:
        fig.savefig(a.preview, format="png", dpi=70)
    print(f"{a.out}: {', '.join(PANELS)}; run {t1 - t0:.0f} s, kill at {killed - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
