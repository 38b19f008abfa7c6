"""Rebalance benchmark: ``delayq cluster up`` with 2 shards, ``--messages``
pending messages (70 % keyed, due 3..30 days out), then ``delayq cluster scale
--shards 3`` (the Spark job in local mode) while a producer offers ``--rate``
keyed and keyless messages a second, due within seconds, and a consumer receives
and acks them.

Figures: ``scale_s`` (the whole ``cluster scale``: start the new shard, the
job, the map switch), ``job_s`` (the job process as it reports itself: Spark
start included), ``bulk_pass_s`` and ``moved`` (its first pass: the moving
itself; ``bulk_release_s``/``bulk_import_s``: seconds its tasks spent in those
calls, summed), ``pass_s`` (each pass), ``outside_passes_s`` (the job's time
besides its passes: Spark's start, mostly), ``timeline_s`` (when the job logged
its session up and each pass done, after the scale began), ``moved_per_s`` (moved over the
job's passes' seconds), and the
producer's and consumer's rates (messages acknowledged / received a second)
over the 20 s before the scale and during it, with their ratio.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.localcluster import start_cluster
from bench.systems import free_port, stop_process
from delayq import Client, Outgoing

DAY_MS = 86_400_000


def populate(address: str, n: int) -> float:
    """``n`` far-future messages; seconds it took."""
    t0 = time.monotonic()
    now = int(time.time() * 1000)
    with Client(address, timeout_s=60) as c:
        for start in range(0, n, 10_000):
            batch = [
                Outgoing(
                    topic="far",
                    body=b"%032d" % i,
                    key=f"c{i % 200_000}" if i % 10 < 7 else "",
                    at=now + 3 * DAY_MS + (i * 27 * DAY_MS) // n,
                )
                for i in range(start, min(n, start + 10_000))
            ]
            out = c.schedule_many(batch)
            assert all(o.ok for o in out), next(o.error for o in out if not o.ok)
    return time.monotonic() - t0


def timeline(log: Path, since: float) -> dict[str, float]:
    """When the job's milestones were logged (its Spark session up, each pass
    done), in seconds after ``since`` (wall clock): where the time outside passes goes."""
    out: dict[str, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if doc.get("msg") == "spark session up":
            out["session_up"] = round(doc["ts"] - since, 1)
        elif doc.get("msg") == "rebalance pass done":
            out[f"pass_{doc.get('pass')}_done"] = round(doc["ts"] - since, 1)
    return out


class Live:
    """A producer offering ``rate`` messages a second and a consumer; counts what was
    acknowledged and received, with when."""

    def __init__(self, address: str, rate: int) -> None:
        self.address, self.rate = address, rate
        self.acked: list[tuple[float, int]] = []
        self.received: list[tuple[float, int]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]

    def start(self) -> Live:
        if self.rate > 0:  # (0: no live traffic)
            for t in self._threads:
                t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            if t.is_alive():
                t.join()

    def _produce(self) -> None:
        batch = 100
        every = batch / self.rate
        i = 0
        with Client(self.address, timeout_s=30) as c:
            next_at = time.monotonic()
            while not self._stop.is_set():
                msgs = [
                    Outgoing(topic="live", body=b"l", delay=0.5, key=f"l{(i + k) % 997}" * (k % 2))
                    for k in range(batch)
                ]
                i += batch
                try:
                    out = c.schedule_many(msgs)
                    self.acked.append((time.monotonic(), sum(o.ok for o in out)))
                except Exception:
                    self.errors += 1
                next_at += every
                time.sleep(max(0.0, next_at - time.monotonic()))

    def _consume(self) -> None:
        with Client(self.address, timeout_s=30) as c:
            while not self._stop.is_set():
                try:
                    got = c.receive("live", "bench", max_messages=1000, wait_s=0.5)
                    if got:
                        c.ack("live", "bench", [m.receipt for m in got])
                        self.received.append((time.monotonic(), len(got)))
                except Exception:
                    self.errors += 1

    @staticmethod
    def rate_of(events: list[tuple[float, int]], t0: float, t1: float) -> float:
        return sum(n for t, n in events if t0 <= t < t1) / max(t1 - t0, 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=2_000, help="live messages offered a second")
    ap.add_argument("--spark-master", default="local[2]")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="delayq-rebalance-"))
    d = root / "c"
    port = free_port()
    sup = start_cluster(root, port, "--shards", "2", env={"DELAYQ_SPARK_MASTER": a.spark_master})
    address = f"127.0.0.1:{port}"
    try:
        populate_s = populate(address, a.messages)
        live = Live(address, a.rate).start()
        time.sleep(20)
        t0, wall_t0 = time.monotonic(), time.time()
        scaled = subprocess.run(
            [sys.executable, "-m", "delayq.cli.main", "cluster", "scale", "--dir", str(d),
             "--shards", "3"],
            capture_output=True, text=True,
        )  # fmt: skip
        t1 = time.monotonic()
        time.sleep(2)
        live.stop()
        if scaled.returncode != 0:
            raise SystemExit(f"cluster scale failed: {scaled.stdout}{scaled.stderr}")
        job: dict[str, Any] = json.loads((d / "scale.json").read_text())["job"]
        passes = job["passes"]
        moving_s = sum(p["seconds"] for p in passes)
        before = (Live.rate_of(live.acked, t0 - 20, t0), Live.rate_of(live.received, t0 - 20, t0))
        during = (Live.rate_of(live.acked, t0, t1), Live.rate_of(live.received, t0, t1))
        out = {
            "messages": a.messages,
            "populate_s": round(populate_s, 1),
            "scale_s": round(t1 - t0, 1),
            "job_s": job.get("seconds"),
            "moved": job["moved"],
            "passes": len(passes),
            "bulk_pass_s": passes[0]["seconds"],
            "bulk_release_s": passes[0].get("release_s"),
            "bulk_import_s": passes[0].get("import_s"),
            "pass_s": [p["seconds"] for p in passes],
            "outside_passes_s": round(job.get("seconds", 0) - moving_s, 1),
            "timeline_s": timeline(d / "rebalance.log", wall_t0),
            "moved_per_s": round(job["moved"] / max(moving_s, 1e-9)),
            "produce_per_s_before": round(before[0]),
            "produce_per_s_during": round(during[0]),
            "consume_per_s_before": round(before[1]),
            "consume_per_s_during": round(during[1]),
            "produce_ratio": round(during[0] / max(before[0], 1e-9), 2),
            "consume_ratio": round(during[1] / max(before[1], 1e-9), 2),
            "live_errors": live.errors,
        }
        print(json.dumps(out))
        if a.json:
            a.json.write_text(json.dumps(out, indent=2))
    finally:
        stop_process(sup, signal.SIGTERM, 60)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
