"""Failover benchmark: ``delayq cluster up`` with 1 shard x ``--replicas`` nodes,
the supervisor's default probe settings unless given, the queue workload of
``queuecheck`` running through the client, and the master SIGKILLed
``--kills`` times; each time it waits for the next master (a higher epoch in
the supervisor's record) and for the dead node to rejoin the in-sync set.

Figures: ``failover_s`` median and max (SIGKILL to the new master recorded and
in office), ``writes_s`` (SIGKILL to the first one-message Schedule acknowledged
again: in sync mode the new master also needs ``min_insync`` members in its
in-sync set), ``rejoin_s`` median and max (the
dead node back as a replica, caught up and in the in-sync set), and the
checker's counts (lost, early, broken cancels must be 0; duplicates and
recovered writes are reported). ``--replication async`` shows what async
replication loses when the master cannot come back in time (``--hold``: keep
the dead master's data away for that long, as a lost machine would be), and
``--restart`` what a plain SIGKILL of an async master loses (it restarts as the
master within its lease: no failover; the figure is then the restart time).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.localcluster import start_cluster
from bench.queuecheck import QueueLoad, check
from bench.systems import free_port, stop_process
from delayq import Client, ClientError


def _record(d: Path) -> dict[str, Any]:
    while True:
        try:
            doc = json.loads((d / "cluster.json").read_text())
            rec: dict[str, Any] = doc["shards"][0]
            rec["pids"] = {n["node"]: n["pid"] for n in doc["nodes"] if n["shard"] == 0}
            return rec
        except (ValueError, OSError, KeyError, IndexError):
            time.sleep(0.01)  # read while being replaced


def _wait(d: Path, ok: Any, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while not ok(rec := _record(d)):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out; record: {rec}")
        time.sleep(0.02)
    return rec


def _first_write(port: int) -> float:
    """When a one-message Schedule first succeeds (monotonic), tried every 20 ms."""
    with Client(f"127.0.0.1:{port}", timeout_s=1.0) as c:
        while True:
            try:
                c.schedule("failover-probe", b"p", delay=3600)  # a refusal raises too
                return time.monotonic()
            except ClientError:
                pass
            time.sleep(0.02)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--replication", default="sync", choices=("sync", "async"))
    ap.add_argument("--hold", type=float, default=0.0, help="seconds the dead master stays away")
    ap.add_argument("--cluster-args", default="", help="more `cluster up` options")
    ap.add_argument(
        "--restart",
        action="store_true",
        help="async: the killed master restarts as the master (no failover); time that",
    )
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="delayq-failover-"))
    d = root / "c"
    port = free_port()
    sup = start_cluster(
        root, port, "--shards", "1", "--replicas", str(a.replicas),
        "--replication", a.replication, *a.cluster_args.split(),
    )  # fmt: skip
    try:
        _wait(d, lambda r: len(r["insync"]) == a.replicas)
        load = QueueLoad(f"127.0.0.1:{port}").start()
        took: list[float] = []
        writes: list[float] = []
        rejoin: list[float] = []
        try:
            for _ in range(a.kills):
                time.sleep(1.0)
                rec = _record(d)
                dead = rec["master"]
                data = d / "shard-0" / dead
                if a.hold:  # a lost machine: its data is away while the shard fails over
                    data.rename(data.with_name("held"))
                    data.write_text("away")
                t0 = time.monotonic()
                os.kill(rec["pids"][dead], signal.SIGKILL)
                if a.restart:  # the same master back in office, at the same epoch
                    pid = rec["pids"][dead]
                    _wait(d, lambda r, n=dead, p=pid: r["pids"].get(n, p) not in (0, p))
                    _wait(d, lambda r, n=dead: r["master"] == n and len(r["insync"]) == a.replicas)
                else:
                    _wait(d, lambda r, e=rec["epoch"]: r["epoch"] > e and r.get("in_office", True))
                took.append(time.monotonic() - t0)
                writes.append(_first_write(port) - t0)
                if a.hold:
                    time.sleep(a.hold)
                    data.unlink()
                    data.with_name("held").rename(data)
                t1 = time.monotonic()
                _wait(d, lambda r, n=dead: len(r["insync"]) == a.replicas and r["pids"].get(n, 0))
                rejoin.append(time.monotonic() - t1)
            load.drain(quiet_s=2)
        finally:
            load.stop()
        found = check(load.history)
        out = {
            "replication": a.replication,
            "kills": a.kills,
            "failover_s_median": round(statistics.median(took), 2),
            "failover_s_max": round(max(took), 2),
            "writes_s_median": round(statistics.median(writes), 2),
            "writes_s_max": round(max(writes), 2),
            "rejoin_s_median": round(statistics.median(rejoin), 2),
            "rejoin_s_max": round(max(rejoin), 2),
            **{k: v for k, v in found.items() if not k.endswith("_ids")},
        }
        print(json.dumps(out))
        if a.json:
            a.json.write_text(json.dumps(out, indent=2))
    finally:
        stop_process(sup, signal.SIGTERM, 60)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
