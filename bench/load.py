"""Lateness under load: how late each server system delivers as the offered load grows.

    python -m bench.load [--systems a,b] [--loads 1000,5000,...] [--seconds S]
                         [--json FILE] [--plot DIR] [--from-json FILE]

For each server system of ``bench.compare`` (``delayq``, ``redis``, ``rocketmq``,
``rocketmq_100ms``), one after another and each in its own worker process, and for
each offered load L (default 1k, 5k, 10k, 20k, 50k msgs/s, in that order): a producer
schedules messages at L msgs/s for ``--seconds`` (batches of 100, paced by the clock),
each due ``LEAD_MS`` after its turn to be sent (1/L apart), so messages also come due
evenly at L msgs/s; a consumer thread receives throughout. Producer, consumer and the
system share this machine's cores: the highest load a system keeps up with here is a
figure of the whole setup, not of the server alone. Figures per load: the rate the producer reached,
lateness p50/p99/max (the consumer's clock minus the due time, as ``bench.compare``
measures it), early and lost counts, and whether the system kept up: the producer
reached ``KEEP_UP`` of L and every message arrived within ``DRAIN_S`` of its due
time. A system stops at the first load it does not keep up with (that point is kept,
marked). ``--plot`` draws p99 lateness against offered load, one line per system
(``load_p99.png``, log scale). Nothing here asserts speed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.compare import BATCH, BODY, read_json
from bench.lateness import lateness_figures
from bench.systems import SYSTEMS, now_ms

SERVERS = ("delayq", "redis", "rocketmq", "rocketmq_100ms")
LOADS = (1_000, 5_000, 10_000, 20_000, 50_000)
LEAD_MS = 2_000  # due this long after sent: room for a batch's trip, never due on arrival
KEEP_UP = 0.95  # of the offered load, reached by the producer
DRAIN_S = 30.0  # after the last due time: what has not arrived by then is lost


class Consumer:
    """A thread polling the system throughout; keeps (handle -> lateness ms) of the
    first delivery of every handle."""

    def __init__(self, system: Any) -> None:
        self.system = system
        self.late: dict[Any, float] = {}
        self.wrong_body = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        late, poll = self.late, self.system.poll
        while not self._stop.is_set():
            t, got = poll(1000, 0.1)
            for handle, at, body in got:
                late.setdefault(handle, t - at)
                self.wrong_body += body != BODY

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def offer(system: Any, consumer: Consumer, load: int, seconds: float) -> dict[str, Any]:
    """One offered load: schedule at ``load`` msgs/s for ``seconds``, then wait for
    every message (up to ``DRAIN_S`` past the last due time)."""
    n = max(BATCH, int(load * seconds) // BATCH * BATCH)
    handles: list[Any] = []
    t0, first_due = time.perf_counter(), now_ms() + LEAD_MS
    for i in range(0, n, BATCH):
        wait = t0 + i / load - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        # message k is due LEAD_MS after its turn to be sent: due at ``load`` msgs/s too;
        # never sooner than LEAD_MS after it is really sent (a producer behind its pace)
        soonest = now_ms() + LEAD_MS
        dues = [max(soonest, first_due + (k * 1000) // load) for k in range(i, i + BATCH)]
        handles += system.schedule([(BODY, due) for due in dues])
    reached = n / (time.perf_counter() - t0)
    until = time.monotonic() + LEAD_MS / 1000 + DRAIN_S
    expect = set(handles)
    while time.monotonic() < until and not expect <= consumer.late.keys():
        time.sleep(0.05)
    late = sorted(consumer.late[h] for h in expect if h in consumer.late)
    lost = len(expect) - len(late)
    kept_up = reached >= KEEP_UP * load and lost == 0
    return {
        "offered_msgs_per_s": load,
        "reached_msgs_per_s": round(reached),
        **lateness_figures(late),
        "lost": lost,
        "kept_up": kept_up,
    }


def run_system(name: str, loads: list[int], seconds: float, workdir: Path) -> list[dict[str, Any]]:
    system = SYSTEMS[name]()
    system.open(workdir)
    consumer = Consumer(system)
    out: list[dict[str, Any]] = []
    try:
        for load in loads:
            print(f"   {name} at {load:,} msgs/s", file=sys.stderr, flush=True)
            point = offer(system, consumer, load, seconds)
            out.append(point)
            if not point["kept_up"]:
                break
    finally:
        consumer.stop()
        system.close()
    if consumer.wrong_body:
        raise SystemExit(f"{name} handed out {consumer.wrong_body} wrong bodies")
    return out


def table(doc: dict[str, Any]) -> str:
    lines = [
        f"{'system':15} {'offered/s':>10} {'reached/s':>10} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8} {'early':>6} {'lost':>6}  kept up"
    ]
    for name, points in doc["systems"].items():
        for p in points:
            lines.append(
                f"{name:15} {p['offered_msgs_per_s']:>10,} {p['reached_msgs_per_s']:>10,} "
                f"{p['lateness_ms_p50']:>8} {p['lateness_ms_p99']:>8} {p['lateness_ms_max']:>8} "
                f"{p['early_count']:>6} {p['lost']:>6}  {'yes' if p['kept_up'] else 'NO'}"
            )
    return "\n".join(lines)


def plot(doc: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, points in doc["systems"].items():
        kept = [p for p in points if p["kept_up"]]
        line = ax.plot(
            [p["offered_msgs_per_s"] for p in kept],
            [max(p["lateness_ms_p99"], 0.01) for p in kept],
            marker="o",
            label=name,
        )
        for p in points:
            if not p["kept_up"] and p["lateness_ms_p99"] >= 0:
                ax.plot(
                    p["offered_msgs_per_s"],
                    max(p["lateness_ms_p99"], 0.01),
                    marker="x",
                    color=line[0].get_color(),
                    markersize=10,
                )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(list(LOADS), [f"{v // 1000}k" for v in LOADS])
    ax.set_xlabel("offered load, msgs/s (scheduled and due at this rate)")
    ax.set_ylabel("p99 lateness, ms (log)")
    ax.set_title("lateness under load (x: the load a system did not keep up with)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    path = out / "load_p99.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def report(doc: dict[str, Any], json_out: Path | None, plot_dir: Path | None) -> None:
    print(table(doc))
    if json_out:
        json_out.write_text(json.dumps(doc, indent=2) + "\n")
    if plot_dir:
        print(f"wrote {plot(doc, plot_dir)}", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--systems", default=",".join(SERVERS), help="comma-separated subset")
    ap.add_argument("--loads", default=",".join(map(str, LOADS)), help="msgs/s, ascending")
    ap.add_argument("--seconds", type=float, default=10.0, help="per load (default 10)")
    ap.add_argument("--json", type=Path, help="write {systems: {name: [point per load]}}")
    ap.add_argument("--plot", type=Path, help="write load_p99.png into this directory")
    ap.add_argument("--from-json", type=Path, help="redraw table and plot from saved results")
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        name, loads, seconds, workdir = a.worker
        points = run_system(name, json.loads(loads), float(seconds), Path(workdir))
        print(json.dumps(points), flush=True)
        return
    if a.from_json:
        try:
            report(read_json(a.from_json), None, a.plot)
        except (ValueError, KeyError) as exc:
            raise SystemExit(f"--from-json: {exc}") from exc
        return
    names = [n.strip() for n in a.systems.split(",") if n.strip()]
    unknown = set(names) - set(SERVERS)
    if unknown:
        raise SystemExit(f"unknown or in-process systems {sorted(unknown)}; choose from {SERVERS}")
    try:
        loads = sorted(int(v) for v in a.loads.split(","))
    except ValueError:
        raise SystemExit(f"--loads must be integers separated by commas, got {a.loads!r}") from None
    if not loads or loads[0] <= 0 or a.seconds <= 0:
        raise SystemExit("--loads and --seconds must be positive")
    doc: dict[str, Any] = {"systems": {}, "seconds": a.seconds, "lead_ms": LEAD_MS}
    root = Path(tempfile.mkdtemp(prefix="delayq-load-"))
    try:
        for name in names:
            print(f"== {name}", file=sys.stderr, flush=True)
            workdir = root / name
            workdir.mkdir()
            run = subprocess.run(
                [sys.executable, "-m", "bench.load", "--worker", name, json.dumps(loads),
                 str(a.seconds), str(workdir)],
                stdout=subprocess.PIPE,  # its progress and errors go to stderr as they come
                text=True,
                cwd=Path(__file__).resolve().parents[1],
            )  # fmt: skip
            if run.returncode != 0:
                raise SystemExit(f"{name} failed (its output is above)")
            doc["systems"][name] = json.loads(run.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report(doc, a.json, a.plot)


if __name__ == "__main__":
    main()
