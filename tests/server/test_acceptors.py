"""``server.acceptors.AcceptingServer`` around a real grpc.aio server (the health
service, registered methods, over a loopback port): a burst of calls is served,
interceptors still see every call, and stopping the server ends its acceptors."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from delayq.server.acceptors import ACCEPTORS, AcceptingServer, supported


class _Seen(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self) -> None:
        self.methods: list[str] = []

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
        details: grpc.HandlerCallDetails,
    ) -> Any:
        self.methods.append(details.method)
        return await continuation(details)


def _acceptors() -> list[asyncio.Task[Any]]:
    return [
        t
        for t in asyncio.all_tasks()
        if getattr(t.get_coro(), "__qualname__", "") == "AcceptingServer._accept"
    ]


async def _burst_then_stop() -> tuple[list[int], list[str], int, int]:
    seen = _Seen()
    server = AcceptingServer(grpc.aio.server(interceptors=[seen]), [seen])
    checks = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await checks.set("", health_pb2.HealthCheckResponse.SERVING)
    running = len(_acceptors())
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        answers = await asyncio.gather(
            *(stub.Check(health_pb2.HealthCheckRequest(), timeout=10) for _ in range(64))
        )
    await server.stop(None)
    return [a.status for a in answers], seen.methods, running, len(_acceptors())


def test_a_burst_is_served_through_the_interceptors_and_stop_ends_the_acceptors() -> None:
    assert supported(), "this grpcio lacks what server.acceptors uses"
    statuses, methods, running, left = asyncio.run(_burst_then_stop())
    assert statuses == [health_pb2.HealthCheckResponse.SERVING] * 64
    assert methods == ["/grpc.health.v1.Health/Check"] * 64
    assert running == ACCEPTORS * 3  # Check, List and Watch: each takes one request
    assert left == 0
