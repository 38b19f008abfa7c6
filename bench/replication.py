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
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc

from bench.e2e import BODY, _all_accepted, _parallel
from bench.systems import spawn_delayq, spawn_delayq_node, stop_process
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


def run_mode(root: Path, mode: str, replicas: int, total: int, threads: int) -> dict[str, Any]:
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
        singles = []
        with Client(address) as c:
            for _ in range(200):
                t1 = time.perf_counter()
                c.schedule("one", BODY, delay=3600)
                singles.append((time.perf_counter() - t1) * 1000)
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
        for p in procs:
            stop_process(p)
        if (channel := _CHANNELS.pop(admin, None)) is not None:
            channel.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--modes", default="async,sync")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    total = 20_000 if a.quick else a.messages
    out: dict[str, Any] = {"replicas": a.replicas}
    for mode in a.modes.split(","):
        root = Path(tempfile.mkdtemp(prefix=f"delayq-repl-{mode}-"))
        try:
            out[mode] = run_mode(root, mode, a.replicas, total, a.threads)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(mode, json.dumps(out[mode]), flush=True)
    if "async" in out and "sync" in out:
        out["sync_over_async"] = round(
            out["sync"]["schedule_msgs_per_s"] / out["async"]["schedule_msgs_per_s"], 3
        )
        print("sync/async schedule throughput:", out["sync_over_async"])
    if a.json:
        a.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
