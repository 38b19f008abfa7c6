"""An exception that is no delayq error, escaping a handler of either port
(``server.internal``): the call ends INTERNAL with a short text naming the method
and the exception's type (not its text), the traceback is logged, and the server
goes on serving; a delayq error that escapes keeps its own status. Over real
gRPC, the server in process (``serve(..., stop=...)``) so that the test can make
the engine fail."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn

import grpc
import pytest

from delayq import Engine, EngineSettings
from delayq.admin.v1 import admin_pb2 as apb
from delayq.admin.v1 import admin_pb2_grpc as arpc
from delayq.engine import Moving
from delayq.errors import NotFound
from delayq.server.app import serve
from delayq.server.config import ServerSettings
from delayq.server.exports import Exports
from delayq.server.internal import MAX_MESSAGE_CHARS, internal_message
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as pb_grpc

SECRET = "a detail for the log only"


def broken(exc: Exception) -> Callable[..., NoReturn]:
    def fail(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise exc

    return fail


def test_the_message_is_short_and_names_the_method_and_the_type() -> None:
    text = internal_message("/delayq.v1.DelayQueue/Stats", ValueError(SECRET))
    assert text == "Stats: internal error (ValueError); see the server log"
    long = type("E" * 300, (Exception,), {})()
    assert len(internal_message("/x.Y/Z", long)) == MAX_MESSAGE_CHARS


async def failed(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value


def test_an_unexpected_exception_is_internal_on_both_ports_and_the_server_serves_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "delayq.server")
    monkeypatch.setattr(Engine, "stats", broken(RuntimeError(SECRET)))  # public, unary
    monkeypatch.setattr(Engine, "receive_batch", broken(KeyError(SECRET)))  # public, a stream
    # admin: what a rebalance past shard 127 raised before forwards reached every shard
    monkeypatch.setattr(Moving, "release", broken(ValueError(SECRET)))
    monkeypatch.setattr(Exports, "end", broken(NotFound("snapshot", "no such snapshot")))
    settings = ServerSettings(
        listen="127.0.0.1:0",
        admin_listen="127.0.0.1:0",
        metrics_listen="off",
        engine=EngineSettings(data_dir=tmp_path / "data"),
    )
    ready: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    async def checks(address: str, admin_address: str) -> None:
        async with (
            grpc.aio.insecure_channel(address) as public,
            grpc.aio.insecure_channel(admin_address) as admin_channel,
        ):
            stub, admin = pb_grpc.DelayQueueStub(public), arpc.ShardAdminStub(admin_channel)
            err = await failed(stub.Stats(pb.StatsRequest(), timeout=10))
            assert err.code() == grpc.StatusCode.INTERNAL
            assert err.details() == "Stats: internal error (RuntimeError); see the server log"
            stream = stub.Subscribe(pb.ReceiveRequest(topic="t", group="g"), timeout=10)
            err = await failed(stream.read())
            assert err.code() == grpc.StatusCode.INTERNAL and "(KeyError)" in str(err.details())
            release = apb.ReleaseRequest(ids=["x"], target=700, target_address="h:1", job="j")
            err = await failed(admin.Release(release, timeout=10))
            assert err.code() == grpc.StatusCode.INTERNAL
            assert err.details() == "Release: internal error (ValueError); see the server log"
            err = await failed(admin.EndExport(apb.EndExportRequest(snapshot="s"), timeout=10))
            assert err.code() == grpc.StatusCode.NOT_FOUND, "a delayq error keeps its status"
            assert "no such snapshot" in str(err.details())
            # and both ports serve on
            new = pb.NewMessage(topic="t", body=b"x", delay_ms=0)
            sent = await stub.Schedule(pb.ScheduleRequest(messages=[new]), timeout=10)
            assert sent.results[0].id
            assert (await stub.GetRoute(pb.GetRouteRequest(), timeout=10)).shard_count == 1
            assert (await admin.Status(apb.StatusRequest(), timeout=10)).role == "master"

    async def run() -> None:
        stop = asyncio.Event()
        server = asyncio.create_task(
            serve(settings, on_ready=lambda a, b, _: ready.put_nowait((a, b)), stop=stop)
        )
        try:
            async with asyncio.timeout(30):
                address, admin_address = await ready.get()
            await checks(address, admin_address)
        finally:
            stop.set()
            await server

    asyncio.run(run())
    logged = [r for r in caplog.records if r.getMessage() == "unexpected error in an RPC"]
    methods = sorted(str(r.method) for r in logged)  # type: ignore[attr-defined]
    assert methods == [
        "/delayq.admin.v1.ShardAdmin/Release",
        "/delayq.v1.DelayQueue/Stats",
        "/delayq.v1.DelayQueue/Subscribe",
    ]
    assert all(r.exc_info and SECRET in str(r.exc_info[1]) for r in logged), "with tracebacks"
    assert not [r for r in caplog.records if "Unexpected" in r.getMessage()], "grpc's own log"
