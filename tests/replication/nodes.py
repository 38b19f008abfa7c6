"""Helpers for tests of shard nodes as real ``delayq serve`` processes: start a
master and replicas, and call their admin service."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


CALL_S = 30.0
"""A call's deadline unless the test gives one: a node that never answers fails
the test in seconds instead of holding it until pytest's timeout."""


class _Deadline(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):
    def _with_deadline(self, details: Any) -> Any:
        if details.timeout is None:
            details = details._replace(timeout=CALL_S)
        return details

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_deadline(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_deadline(details), request)


def _channel(address: str) -> grpc.Channel:
    return grpc.intercept_channel(grpc.insecure_channel(address), _Deadline())


def admin(address: str) -> arpc.ShardAdminStub:
    return arpc.ShardAdminStub(_channel(address))


def public(address: str) -> rpc.DelayQueueStub:
    return rpc.DelayQueueStub(_channel(address))


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
