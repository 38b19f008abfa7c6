"""Helpers for tests of shard nodes as real ``delayq serve`` processes: start a
master and replicas, and call their admin service."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

from delayq.admin.v1 import admin_pb2 as apb
from delayq.admin.v1 import admin_pb2_grpc as arpc
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as rpc
from tests.support.servers import ServerProcess


def node(tmp: Path, name: str, *args: str, follow: str = "") -> ServerProcess:
    extra = ["--node-name", name, "--flush-interval", "200ms", *args]
    if follow:
        extra += ["--follow", follow]
    return ServerProcess(tmp / name, extra).start()


def admin(address: str) -> arpc.ShardAdminStub:
    return arpc.ShardAdminStub(grpc.insecure_channel(address))


def public(address: str) -> rpc.DelayQueueStub:
    return rpc.DelayQueueStub(grpc.insecure_channel(address))


def status(address: str, **probe: object) -> apb.StatusResponse:
    return admin(address).Status(apb.StatusRequest(**probe), timeout=5)  # type: ignore[arg-type]


def schedule(address: str, *bodies: bytes, delay_ms: int = 60_000, topic: str = "t") -> list[str]:
    reply = public(address).Schedule(
        pb.ScheduleRequest(
            messages=[pb.NewMessage(topic=topic, body=b, delay_ms=delay_ms) for b in bodies]
        ),
        timeout=10,
    )
    assert all(r.id for r in reply.results), reply
    return [r.id for r in reply.results]


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def caught_up(master: str, *replicas: str) -> Callable[[], bool]:
    def check() -> bool:
        end = status(master).log_end
        return all(status(r).log_end == end for r in replicas)

    return check


@contextmanager
def nodes(*procs: ServerProcess) -> Iterator[None]:
    try:
        yield
    finally:
        for p in procs:
            if p.proc is not None and p.proc.poll() is None:
                p.stop()
