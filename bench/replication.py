"""Replication benchmark: one master and ``--replicas`` replicas (real ``delayq
serve`` processes, one machine), async against sync replication, driven over
gRPC by the Python client: 200-byte bodies, batches of 100.

Figures per mode (``--json FILE`` writes them):
  schedule_msgs_per_s       Schedule calls of 100 from several client threads
  ack_ms_p50/p99            latency of one such call (the acknowledgement)
  single_ack_ms_p50/p99     latency of a one-message Schedule, one caller
  lag_bytes_max/p50, lag_ms_max/p50
                            the master's view of each replica's lag, sampled
                            every 50 ms during the schedule load
  catch_up_s                from the end of the load to every replica caught up
  sync_over_async           sync schedule throughput as a share of async's

``--quick`` shrinks everything to a few seconds a mode.

``--idle-s S`` measures instead, per mode, what replication costs at rest and one
write's wait: a lone node, and a master with one replica, all three idle at once
for ``S`` seconds, then ``--singles`` one-message Schedules on the master:
  idle_cpu_pct_lone/master/replica
                            CPU time (user + system) over the idle window, as a
                            percentage of one core
  single_ack_ms_p50/p99     latency of a one-message Schedule, one caller

``--idle-cluster N`` (with ``--idle-s S``): ``delayq cluster up`` with N shards x 2
nodes in the first of ``--modes``, idle for ``S`` seconds once ready (and 10 s
settled): the nodes' CPU time all together and per node, and the supervisor's
(it probes every node 4 times a second), as percentages of one core.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import psutil

from bench.e2e import BODY, _all_accepted, _parallel, single_schedules_ms
from bench.localcluster import start_cluster
from bench.systems import free_port, spawn_delayq, spawn_delayq_node, stop_process
from delayq import Client, Outgoing
from delayq.admin.v1 import admin_pb2 as apb
from delayq.admin.v1 import admin_pb2_grpc as arpc


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(len(xs) * q))], 3) if xs else 0.0


_CHANNELS: dict[str, grpc.Channel] = {}


def _status(address: str) -> apb.StatusResponse:
    """The node's admin Status (one channel per address for the whole run)."""
    channel = _CHANNELS.setdefault(address, grpc.insecure_channel(address))
    reply: apb.StatusResponse = arpc.ShardAdminStub(channel).Status(apb.StatusRequest(), timeout=5)
    return reply


def _shard(root: Path, mode: str, replicas: int) -> tuple[list[subprocess.Popen[str]], str, str]:
    """A master and ``replicas`` replicas in ``mode``, every replica connected: the
    processes (the master first), the master's public and admin addresses."""
    args = ["--replication", mode, "--min-insync", str(min(2, replicas + 1))]
    master, address, admin = spawn_delayq_node(root / "m", "--node-name", "m", *args)
    procs = [master]
    try:
        for i in range(replicas):
            p, _ = spawn_delayq(root / f"r{i}", "--node-name", f"r{i}", "--follow", admin, *args)
            procs.append(p)
        deadline = time.monotonic() + 20
        while len([r for r in _status(admin).replicas if r.connected]) < replicas:
            if time.monotonic() > deadline:
                raise SystemExit("replicas did not connect")
            time.sleep(0.05)
    except BaseException:
        _stop(procs, admin)
        raise
    return procs, address, admin


def _stop(procs: list[subprocess.Popen[str]], admin: str) -> None:
    for p in procs:
        stop_process(p)
    if (channel := _CHANNELS.pop(admin, None)) is not None:
        channel.close()


def _cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def run_idle(root: Path, mode: str, seconds: float, singles: int) -> dict[str, Any]:
    """Idle CPU of a lone node, a master and its one replica over the same window
    (after a few seconds to settle), then one-message Schedule latencies."""
    lone, _ = spawn_delayq(root / "lone", "--node-name", "lone")
    procs, address, admin = [lone], "", ""
    try:
        shard, address, admin = _shard(root, mode, 1)
        procs += shard
        time.sleep(3)  # past start-up's work (the first checkpoint, the stream's start)
        ps = [psutil.Process(p.pid) for p in procs]
        before = [_cpu_s(p) for p in ps]
        t0 = time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - t0
        cpu = [round(100 * (_cpu_s(p) - b) / wall, 2) for p, b in zip(ps, before, strict=True)]
        lat = single_schedules_ms(address, singles, "one")
        return {
            "idle_s": round(wall, 1),
            "idle_cpu_pct_lone": cpu[0],
            "idle_cpu_pct_master": cpu[1],
            "idle_cpu_pct_replica": cpu[2],
            "single_ack_ms_p50": _pct(lat, 0.5),
            "single_ack_ms_p99": _pct(lat, 0.99),
        }
    finally:
        _stop(procs, admin)


def run_idle_cluster(root: Path, mode: str, shards: int, seconds: float) -> dict[str, Any]:
    """CPU of an idle local cluster of ``shards`` x 2 nodes (module notes)."""
    sup = start_cluster(
        root, free_port(), "--shards", str(shards), "--replicas", "2", "--replication", mode
    )
    try:
        time.sleep(10)  # every stream up, the first checkpoints written
        supervisor = psutil.Process(sup.pid)
        nodes = supervisor.children()
        before = [_cpu_s(p) for p in nodes]
        own = _cpu_s(supervisor)
        t0 = time.monotonic()
        time.sleep(seconds)
        wall = time.monotonic() - t0
        spent = sum(_cpu_s(p) - b for p, b in zip(nodes, before, strict=True))
        return {
            "idle_s": round(wall, 1),
            "nodes": len(nodes),
            "idle_cpu_pct_nodes": round(100 * spent / wall, 1),
            "idle_cpu_pct_per_node": round(100 * spent / wall / len(nodes), 2),
            "idle_cpu_pct_supervisor": round(100 * (_cpu_s(supervisor) - own) / wall, 1),
        }
    finally:
        stop_process(sup, timeout_s=120)


def run_mode(root: Path, mode: str, replicas: int, total: int, threads: int) -> dict[str, Any]:
    procs, address, admin = _shard(root, mode, replicas)
    try:
        lags: list[tuple[int, int]] = []
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                lags.extend((r.lag_bytes, r.lag_ms) for r in _status(admin).replicas)
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        per = total // threads
        latencies: list[float] = []

        def work(i: int) -> None:
            with Client(address) as c:
                for _ in range(per // 100):
                    batch = [Outgoing(topic="far", body=BODY, delay=3600) for _ in range(100)]
                    t0 = time.perf_counter()
                    _all_accepted(c.schedule_many(batch))
                    latencies.append((time.perf_counter() - t0) * 1000)

        t0 = time.perf_counter()
        _parallel(threads, work)
        rate = per * threads / (time.perf_counter() - t0)
        end_load = time.monotonic()
        done.set()
        sampler.join()
        end = _status(admin).log_end
        while any(_status(admin).replicas[i].written < end for i in range(replicas)):
            time.sleep(0.01)
        catch_up = time.monotonic() - end_load
        singles = single_schedules_ms(address, 200, "one")
        return {
            "schedule_msgs_per_s": round(rate),
            "ack_ms_p50": _pct(latencies, 0.5),
            "ack_ms_p99": _pct(latencies, 0.99),
            "single_ack_ms_p50": _pct(singles, 0.5),
            "single_ack_ms_p99": _pct(singles, 0.99),
            "lag_bytes_p50": statistics.median([b for b, _ in lags]) if lags else 0,
            "lag_bytes_max": max((b for b, _ in lags), default=0),
            "lag_ms_p50": statistics.median([m for _, m in lags]) if lags else 0,
            "lag_ms_max": max((m for _, m in lags), default=0),
            "catch_up_s": round(catch_up, 3),
        }
    finally:
        _stop(procs, admin)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--modes", default="async,sync")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--idle-s", type=float, help="measure idle CPU over this window instead")
    ap.add_argument("--singles", type=int, default=500, help="one-message Schedules (--idle-s)")
    ap.add_argument("--idle-cluster", type=int, metavar="N", help="N shards x 2 nodes (--idle-s)")
    a = ap.parse_args()
    if a.idle_cluster:
        mode = a.modes.split(",")[0]
        root = Path(tempfile.mkdtemp(prefix="delayq-repl-cluster-"))
        try:
            figures = run_idle_cluster(root, mode, a.idle_cluster, a.idle_s or 30)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(mode, json.dumps(figures), flush=True)
        if a.json:
            a.json.write_text(json.dumps({mode: figures}, indent=2))
        return
    total = 20_000 if a.quick else a.messages
    out: dict[str, Any] = {"replicas": 1 if a.idle_s else a.replicas}
    for mode in a.modes.split(","):
        root = Path(tempfile.mkdtemp(prefix=f"delayq-repl-{mode}-"))
        try:
            if a.idle_s:
                out[mode] = run_idle(root, mode, a.idle_s, a.singles)
            else:
                out[mode] = run_mode(root, mode, a.replicas, total, a.threads)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(mode, json.dumps(out[mode]), flush=True)
    if "async" in out and "sync" in out and not a.idle_s:
        out["sync_over_async"] = round(
            out["sync"]["schedule_msgs_per_s"] / out["async"]["schedule_msgs_per_s"], 3
        )
        print("sync/async schedule throughput:", out["sync_over_async"])
    if a.json:
        a.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
