"""A stand-in for ``delayq serve`` in a replicated local cluster: the admin contract
of ``delayq.admin.v1.ShardAdmin`` and gRPC health, nothing else (no messages).

It lets the supervisor's side (flags, failover loop, in-sync set, map rewrites,
restarts) run end to end before the real server has replication. Its "CommitLog"
is a counter: a master whose lease is valid (or that was never given one) grows
its ``log_end`` by 100 every 100 ms and fsyncs (``flushed``) every 300 ms; a
replica streams from its master over
``Replicate`` (one report, one chunk, every 50 ms) and copies the master's end.
Epoch and role persist in ``DATA_DIR/stand-in.json``. A node without ``--follow``
starts as master (epoch 1 on a fresh directory). Used as::

    python stand_in_node.py -m delayq.cli.main serve --listen ... --node-name ...

(the supervisor's command line, with this file as its "python").
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from delayq.admin.v1 import admin_pb2, admin_pb2_grpc

MARGIN_MS = 200


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class Node(admin_pb2_grpc.ShardAdminServicer):  # type: ignore[misc]
    def __init__(self, args: argparse.Namespace) -> None:
        self.name = args.node_name
        self.address = args.listen
        self.replication = args.replication
        self.min_insync = args.min_insync
        self.file = Path(args.data_dir) / "stand-in.json"
        self.file.parent.mkdir(parents=True, exist_ok=True)
        saved = json.loads(self.file.read_text()) if self.file.exists() else {}
        self.lock = threading.Lock()
        self.epoch = int(saved.get("epoch", 0))
        self.log_end = int(saved.get("log_end", 0))
        self.flushed = self.log_end
        self.ticks = 0
        self.following = args.follow or ""
        self.role = "replica" if args.follow else "master"
        if self.role == "master" and self.epoch == 0:
            self.epoch = 1
        self.fenced = False
        self.lease_until: int | None = None  # None: never given one, never lapses
        self.insync: set[str] = {self.name}
        self.replicas: dict[str, dict[str, Any]] = {}
        self.failovers = 0
        self.high_water = 0
        self.save()

    def save(self) -> None:
        self.file.write_text(json.dumps({"epoch": self.epoch, "log_end": self.flushed}))

    def delivering(self) -> bool:
        lease_ok = self.lease_until is None or now_ms() < self.lease_until
        return self.role == "master" and not self.fenced and lease_ok

    def tick(self) -> None:
        with self.lock:
            self.ticks += 1
            if self.delivering():
                self.log_end += 100
            if self.role != "master" or self.ticks % 3 == 0:  # a master fsyncs every 300 ms
                self.flushed = self.log_end
            if self.role == "master":
                flushed = [self.flushed] + [
                    r["flushed"]
                    for n, r in self.replicas.items()
                    if n in self.insync and r["epoch"] == self.epoch
                ]
                if len(flushed) == len(self.insync | {self.name}):
                    self.high_water = max(self.high_water, min(flushed))
            self.save()

    def status(self) -> Any:
        replicas = (
            [
                admin_pb2.ReplicaState(
                    name=n,
                    written=r["flushed"],
                    flushed=r["flushed"],
                    lag_bytes=max(0, self.log_end - r["flushed"]),
                    connected=r["connected"] and r["epoch"] == self.epoch,
                    insync=n in self.insync,
                )
                for n, r in sorted(self.replicas.items())
            ]
            if self.role == "master"
            else []
        )
        return admin_pb2.StatusResponse(
            name=self.name,
            address=self.address,
            role=self.role,
            epoch=self.epoch,
            fenced=self.fenced,
            lease_valid=self.delivering(),
            log_end=self.log_end,
            flushed=self.flushed,
            high_water=self.high_water if self.role == "master" else 0,
            insync=sorted(self.insync) if self.role == "master" else [],
            replicas=replicas,
            master=self.following,
            replication=self.replication,
            min_insync=self.min_insync,
            failovers=self.failovers,
        )

    def Status(self, request: Any, context: Any) -> Any:
        with self.lock:
            if (
                request.epoch == self.epoch
                and self.role == "master"
                and request.lease_ms > 0
                and not self.fenced
            ):
                self.lease_until = now_ms() + request.lease_ms - MARGIN_MS
                self.insync = set(request.insync)
            return self.status()

    def Promote(self, request: Any, context: Any) -> Any:
        with self.lock:
            if request.epoch <= self.epoch:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "epoch not above mine")
            self.role, self.epoch, self.fenced, self.following = "master", request.epoch, False, ""
            self.insync = set(request.insync)
            self.lease_until = now_ms() + request.lease_ms - MARGIN_MS
            self.replicas.clear()
            self.failovers += 1
            self.save()
            return self.status()

    def Follow(self, request: Any, context: Any) -> Any:
        with self.lock:
            if request.epoch < self.epoch:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "epoch below mine")
            self.role, self.epoch, self.fenced = "replica", request.epoch, False
            self.following, self.insync, self.lease_until = request.master, set(), None
            self.save()
            return self.status()

    def Fence(self, request: Any, context: Any) -> Any:
        with self.lock:
            if request.epoch < self.epoch:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "epoch below mine")
            self.fenced = True
            return self.status()

    def Replicate(self, reports: Any, context: Any) -> Any:
        name = ""
        try:
            for report in reports:
                with self.lock:
                    name = report.name or name
                    if self.role != "master" or not self.delivering():
                        return  # no stream without a lease
                    self.replicas[name] = {
                        "flushed": report.flushed,
                        "epoch": report.epoch,
                        "connected": True,
                    }
                    chunk = admin_pb2.LogChunk(
                        epoch=self.epoch, log_end=self.log_end, high_water=self.high_water
                    )
                yield chunk
        finally:
            with self.lock:
                if name in self.replicas:
                    self.replicas[name]["connected"] = False

    def follow_loop(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with self.lock:
                target = self.following if self.role == "replica" else ""
            if not target:
                stop.wait(0.05)
                continue
            try:
                with grpc.insecure_channel(target) as ch:
                    stub = admin_pb2_grpc.ShardAdminStub(ch)
                    for chunk in stub.Replicate(self.reports(stop, target), timeout=30):
                        with self.lock:
                            if chunk.epoch >= self.epoch and self.following == target:
                                self.epoch = chunk.epoch
                                self.log_end = self.flushed = chunk.log_end
            except grpc.RpcError:
                pass
            stop.wait(0.1)

    def reports(self, stop: threading.Event, target: str) -> Any:
        while not stop.is_set():
            with self.lock:
                if self.following != target or self.role != "replica":
                    return
                report = admin_pb2.ReplicaReport(
                    name=self.name, epoch=self.epoch, written=self.log_end, flushed=self.flushed
                )
            yield report
            time.sleep(0.05)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("-m")
    p.add_argument("command", nargs="?")
    for flag in ("--shard-map", "--shard", "--data-dir", "--listen", "--metrics-listen"):
        p.add_argument(flag)
    p.add_argument("--log-format")
    p.add_argument("--node-name", default="node-0")
    p.add_argument("--follow")
    p.add_argument("--replication", default="async")
    p.add_argument("--min-insync", type=int, default=2)
    args = p.parse_args(argv)
    node = Node(args)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    admin_pb2_grpc.add_ShardAdminServicer_to_server(node, server)
    health_servicer = health.HealthServicer()
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    server.add_insecure_port(args.listen)
    server.start()
    print(json.dumps({"msg": f"stand-in {node.name} on {args.listen} as {node.role}"}), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    follower = threading.Thread(target=node.follow_loop, args=(stop,), daemon=True)
    follower.start()
    while not stop.wait(0.1):
        node.tick()
    server.stop(0.5).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
