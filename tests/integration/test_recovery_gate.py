"""``delayq serve`` answers before its engine has recovered: health says
NOT_SERVING (and ``/readyz`` on the metrics port 503), the shard's calls are
refused UNAVAILABLE (retryable), metrics say the shard is not open; once
recovery ends, the same calls succeed.

The server runs in process (``serve(..., stop=...)``) on real sockets, so that
the test can hold recovery at its start: the real recovery runs once let go."""

from __future__ import annotations

import asyncio
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from bench.systems import free_port
from grpc_health.v1 import health_pb2, health_pb2_grpc

from delayq import AsyncClient, Engine, EngineSettings
from delayq.errors import FailedPrecondition
from delayq.server.app import RECOVERING, SERVICE_NAME, serve
from delayq.server.config import ServerSettings
from delayq.timers.deliveries import Deliveries
from delayq.timers.lifecycle import opening
from delayq.timers.state import ShardState
from delayq.v1 import delayq_pb2 as pb
from delayq.v1 import delayq_pb2_grpc as pb_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def settings_for(data: Path) -> ServerSettings:
    return ServerSettings(
        listen=f"127.0.0.1:{free_port()}",
        admin_listen="127.0.0.1:0",
        metrics_listen=f"127.0.0.1:{free_port()}",
        engine=EngineSettings(data_dir=data),
    )


def held_recovery(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """(entered, resume): recovery sets ``entered``, then waits for ``resume``."""
    entered, resume = threading.Event(), threading.Event()
    real = opening.recover

    def held(state: ShardState, deliveries: Deliveries) -> ShardState:
        entered.set()
        assert resume.wait(30), "the test never let recovery go on"
        return real(state, deliveries)

    monkeypatch.setattr(opening, "recover", held)
    return entered, resume


async def health_of(channel: grpc.aio.Channel) -> set[int]:
    stub = health_pb2_grpc.HealthStub(channel)
    return {
        (await stub.Check(health_pb2.HealthCheckRequest(service=name))).status
        for name in ("", SERVICE_NAME)
    }


async def metrics_text(address: str) -> str:
    def get() -> str:
        with urllib.request.urlopen(f"http://{address}/metrics") as resp:
            return str(resp.read().decode())

    return await asyncio.to_thread(get)


async def readyz(address: str) -> tuple[int, str]:
    """The plain HTTP probe (what a kubelet asks when the ports speak TLS)."""

    def get() -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://{address}/readyz") as resp:
                return int(resp.status), str(resp.read().decode())
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    return await asyncio.to_thread(get)


def test_the_shard_answers_while_it_recovers_and_serves_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, resume = held_recovery(monkeypatch)
    settings = settings_for(tmp_path / "data")
    metrics = settings.metrics_listen

    async def checks() -> None:
        assert await asyncio.to_thread(entered.wait, 30), "recovery never started"
        async with grpc.aio.insecure_channel(settings.listen) as channel:
            assert await health_of(channel) == {NOT_SERVING}
            stub = pb_grpc.DelayQueueStub(channel)
            new = pb.NewMessage(topic="t", body=b"x", delay_ms=0)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Schedule(pb.ScheduleRequest(messages=[new]))
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert refused.value.details() == RECOVERING
            assert ("retry-after-ms", "1000") in tuple(refused.value.trailing_metadata())
            route = await stub.GetRoute(pb.GetRouteRequest())  # the map needs no recovery
            assert route.shard_count == 1 and route.shards[0].master == settings.listen
            stream = stub.Subscribe(pb.ReceiveRequest(topic="t", group="g"))
            with pytest.raises(grpc.aio.AioRpcError) as streamed:
                await stream.read()
            assert streamed.value.code() == grpc.StatusCode.UNAVAILABLE
            text = await metrics_text(metrics)
            assert "delayq_open 0.0" in text and "delayq_scheduled_total" not in text
            assert await readyz(metrics) == (503, "recovering\n")
            # a client started now retries until the shard serves
            async with AsyncClient(settings.listen) as client:
                scheduled = asyncio.create_task(client.schedule("t", b"x", delay=0))
                await asyncio.sleep(0.3)
                assert not scheduled.done(), "a call went through before recovery ended"
                resume.set()
                sent = await scheduled
                got = await client.receive("t", "g", wait_s=5)
            assert [m.id for m in got] == [sent.id]
            assert await health_of(channel) == {SERVING}
            text = await metrics_text(metrics)
            assert "delayq_open 1.0" in text and "delayq_scheduled_total 1.0" in text
            assert await readyz(metrics) == (200, "serving\n")

    async def run() -> None:
        stop = asyncio.Event()
        server = asyncio.create_task(serve(settings, stop=stop))
        try:
            await checks()
        finally:  # a failed check must not leave recovery waiting, nor the server up
            resume.set()
            stop.set()
            await server

    asyncio.run(run())


def test_a_failed_recovery_closes_the_port_again(tmp_path: Path) -> None:
    data = tmp_path / "data"
    settings = settings_for(data)
    holder = Engine(EngineSettings(data_dir=data))  # holds the directory's lock
    with holder, pytest.raises(FailedPrecondition, match="in use"):
        asyncio.run(serve(settings, stop=asyncio.Event()))
    for address in (settings.listen, settings.metrics_listen):
        host, _, port = address.rpartition(":")
        with socket.socket() as s:
            s.bind((host, int(port)))  # free again: raises if still held
