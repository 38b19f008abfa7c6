"""``server.rpcmetrics`` through the port's handler wrapper (``handlers.Handlers``)
on a real grpc.aio server: each call is counted once, when it ends, under the
code it ended with: OK, the status it aborted with, INTERNAL for an escaped
exception, CANCELLED for a deadline that passed or a stream the client left."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from delayq.server.decoding import RefusalLog
from delayq.server.handlers import Guard, Handlers
from delayq.server.internal import failure
from delayq.server.rpcmetrics import RpcDurations


def _same(x: bytes) -> bytes:
    return x


async def _ok(req: bytes, _: Any) -> bytes:
    return req


async def _refused(_req: bytes, ctx: grpc.aio.ServicerContext) -> bytes:
    await ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "no")
    raise AssertionError("unreachable")


async def _broken(_req: bytes, _: Any) -> bytes:
    raise ValueError("a bug")


async def _slow(_req: bytes, _: Any) -> bytes:
    await asyncio.sleep(30)
    return b""


async def _endless(_req: bytes, _: Any) -> AsyncIterator[bytes]:
    while True:
        yield b"x"
        await asyncio.sleep(0.01)


class _Service(grpc.GenericRpcHandler):  # type: ignore[misc]
    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        unary = {
            "/t.S/Ok": _ok,
            "/t.S/Refused": _refused,
            "/t.S/Broken": _broken,
            "/t.S/Slow": _slow,
        }
        if details.method in unary:
            return grpc.unary_unary_rpc_method_handler(unary[details.method], _same, _same)
        if details.method == "/t.S/Endless":
            return grpc.unary_stream_rpc_method_handler(_endless, _same, _same)
        return None


def _counts(durations: RpcDurations) -> dict[tuple[str, str], float]:
    registry = CollectorRegistry()
    registry.register(durations)
    out = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            if s.name == "delayq_rpc_duration_seconds_count":
                assert s.labels["service"] == "t.S"
                out[s.labels["method"], s.labels["code"]] = s.value
    return out


def test_every_call_is_counted_once_under_the_code_it_ended_with() -> None:
    durations = RpcDurations()
    seen: dict[tuple[str, str], float] = {}

    async def run() -> None:
        handlers = Handlers(Guard(RefusalLog(), failure, durations))
        handlers.add_generic_rpc_handlers((_Service(),))
        server = grpc.aio.server()
        handlers.add_to(server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                for _ in range(2):
                    await ch.unary_unary("/t.S/Ok", _same, _same)(b"a")
                for method, code in (
                    ("Refused", grpc.StatusCode.INVALID_ARGUMENT),
                    ("Broken", grpc.StatusCode.INTERNAL),
                ):
                    try:
                        await ch.unary_unary(f"/t.S/{method}", _same, _same)(b"a")
                    except grpc.aio.AioRpcError as exc:
                        assert exc.code() == code
                try:
                    await ch.unary_unary("/t.S/Slow", _same, _same)(b"a", timeout=0.2)
                except grpc.aio.AioRpcError as exc:
                    assert exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
                call = ch.unary_stream("/t.S/Endless", _same, _same)(b"a")
                for _ in range(3):
                    await call.read()
                call.cancel()
                want = 6
                for _ in range(500):  # the server ends its side after the client's
                    if sum(_counts(durations).values()) >= want:
                        break
                    await asyncio.sleep(0.01)
                seen.update(_counts(durations))  # while the server runs: not at its stop
        finally:
            await server.stop(None)

    asyncio.run(run())
    assert seen == {
        ("Ok", "OK"): 2,
        ("Refused", "INVALID_ARGUMENT"): 1,
        ("Broken", "INTERNAL"): 1,
        ("Slow", "CANCELLED"): 1,
        ("Endless", "CANCELLED"): 1,
    }
