"""A receive's 32 acks, each an AckMessage call of its own (as the official Java
client sends them), are taken by the server together, not one at a time: a real
``delayq serve --rocketmq-listen`` process, raw stubs, 8 receivers long-polling
meanwhile (issue 63's ack stall; ``bench.ackstall`` measures it).

grpc.aio alone asks for the next call of a method only after taking the previous
one, so the event loop went to sleep about once every three acks, waiting for
the core's answer to cross threads, and a burst waited ~100-800 ms with the CPU
low (``server.acceptors`` takes them together). What is asserted is that
signature, counted by the kernel (the event-loop thread's voluntary context
switches per ack: ~0.35 before, ~0.05 after, under a load of 10 on 2 cores), not
a time: another process taking the cores delays the acks but does not make the
server's loop sleep."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import psutil
import pytest
from bench.ackstall import AckFigures, idle

from delayq.rocketmq.v2 import service_pb2_grpc as svc_grpc
from tests.support.servers import ServerProcess

pytestmark = pytest.mark.timeout(180)

RECEIVERS = 8
ROUNDS = 8  # receives of 32, each acked at once: 256 acks
MAX_SLEEPS_PER_ACK = 0.2
"""Taken one at a time: 0.34-0.44 here; taken together: 0.04-0.15."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("ackstall") / "data"
    s = ServerProcess(data, ["--rocketmq-listen", "127.0.0.1:0"]).start()
    try:
        yield s
    finally:
        s.stop()


async def _acks_with_receivers(s: ServerProcess) -> AckFigures:
    assert s.proc is not None
    process = psutil.Process(s.proc.pid)
    async with grpc.aio.insecure_channel(s.rocketmq_address) as channel:
        stub = svc_grpc.MessagingServiceStub(channel)
        await idle(stub, process, 0, 1)  # warm-up: the first calls' code paths
        return await idle(stub, process, RECEIVERS, ROUNDS)


def test_a_receives_acks_are_taken_together_while_receivers_long_poll(
    server: ServerProcess,
) -> None:
    got = asyncio.run(_acks_with_receivers(server))
    assert got.acks == ROUNDS * 32
    assert got.loop_sleeps < MAX_SLEEPS_PER_ACK, (
        f"the event loop slept {got.loop_sleeps} times an ack: the acks were taken one "
        f"at a time (p50 {got.p50_ms} ms, p99 {got.p99_ms} ms, server CPU "
        f"{got.server_cpu:.0%} of a core)"
    )
