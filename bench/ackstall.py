"""How long a receive's acks take on ``delayq serve``'s RocketMQ 5 port while other
receivers work: the latency of 32 concurrent AckMessage calls (one receipt
each, as the official Java client acks a receive) for K receivers, and the
server's CPU meanwhile (busy, or waiting).

    python -m bench.ackstall [--shape busy|idle] [--receivers 1,4,8] [--rounds 12]
                             [--together 1] [--flush async|sync] [--json FILE]

Shapes (raw stubs of the vendored protos over one channel, a real server process):
  busy  K consumers of one group, as ``bench.compare``'s Java client runs them: each
        receives 32 messages of a backlog, acks them all at once, receives again;
        every ack is timed (K=1: no other receiver)
  idle  K receivers long-poll an idle group (20 s) while one receive of 32 messages
        (``--together N``: N receives) is acked at once, ``rounds`` times; only those
        acks are timed

Figures per K: the acks' p50/p99/max (ms), the median of a receive's 32 acks from
the first sent to the last answered (burst), the receives' p50 (busy: those that
brought messages, from the call to its last frame), messages acked per second
(busy), the server's CPU over the timed time as a share of one core (the whole
process and its event-loop thread) and how many times its event-loop thread went
to sleep (voluntary context switches) per ack. Speed is never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
import psutil

from bench.adapter import stop_process
from bench.systems import served_address, spawn_delayq_line
from delayq.rocketmq.v2 import definition_pb2 as rmq
from delayq.rocketmq.v2 import service_pb2 as svc
from delayq.rocketmq.v2 import service_pb2_grpc as svc_grpc

__all__ = ["BATCH", "AckFigures", "busy", "idle", "main"]

BATCH = 32
"""Messages a receive asks for, each acked by a call of its own."""
POLL_S = 20.0
"""The idle receivers' ``long_polling_timeout``."""


@dataclass(frozen=True, slots=True)
class AckFigures:
    shape: str
    receivers: int
    acks: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    burst_ms: float  # median of the receives' first-ack-sent to last-answer times
    receive_p50_ms: float  # busy: the receives that brought messages, call to last frame
    acked_per_s: float  # busy: messages received and acked a second
    server_cpu: float  # server CPU seconds / wall seconds over the timed spans
    loop_cpu: float  # the same, of its event-loop (main) thread alone
    loop_sleeps: float  # times the event-loop thread went to sleep, per ack


def _name() -> str:
    return "a" + uuid.uuid4().hex[:10]


def _receive_request(topic: str, group: str, wait_s: float) -> Any:
    req = svc.ReceiveMessageRequest(batch_size=BATCH)
    req.group.name = group
    req.message_queue.topic.name = topic
    req.message_queue.broker.name = "shard-0"
    req.filter_expression.type = rmq.TAG
    req.filter_expression.expression = "*"
    req.long_polling_timeout.FromMilliseconds(int(wait_s * 1000))
    req.invisible_duration.FromMilliseconds(60_000)
    return req


async def _receive(stub: Any, req: Any, wait_s: float) -> list[rmq.Message]:
    out = []
    async for frame in stub.ReceiveMessage(req, timeout=wait_s + 10):
        if frame.WhichOneof("content") == "message":
            out.append(frame.message)
    return out


async def _send(stub: Any, topic: str, n: int) -> None:
    """``n`` messages due now, 100 a call."""
    for first in range(0, n, 100):
        messages = []
        for _ in range(min(100, n - first)):
            m = rmq.Message(body=b"x" * 200)
            m.topic.name = topic
            m.system_properties.message_id = "01" + uuid.uuid4().hex.upper()
            m.system_properties.message_type = rmq.NORMAL
            messages.append(m)
        sent = await stub.SendMessage(svc.SendMessageRequest(messages=messages), timeout=30)
        if sent.status.code != rmq.OK:
            raise RuntimeError(f"send answered {sent.status}")


async def _ack(stub: Any, topic: str, group: str, m: rmq.Message) -> float:
    """One AckMessage of one receipt: its latency in ms."""
    req = svc.AckMessageRequest()
    req.group.name, req.topic.name = group, topic
    sp = m.system_properties
    req.entries.add(message_id=sp.message_id, receipt_handle=sp.receipt_handle)
    began = time.perf_counter()
    got = await stub.AckMessage(req, timeout=30)
    took = (time.perf_counter() - began) * 1000
    if got.status.code != rmq.OK:
        raise RuntimeError(f"ack answered {got.status}")
    return took


async def _acks(stub: Any, topic: str, group: str, got: list[rmq.Message]) -> list[float]:
    return list(await asyncio.gather(*(_ack(stub, topic, group, m) for m in got)))


def loop_sleeps(pid: int) -> int:
    """How many times process ``pid``'s main thread (its event loop) has gone to
    sleep so far: its voluntary context switches (it waited for something)."""
    with open(f"/proc/{pid}/task/{pid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise RuntimeError(f"no voluntary_ctxt_switches for {pid}")


class _Cpu:
    """The server's CPU seconds (whole, and its main thread's) over timed spans."""

    def __init__(self, server: psutil.Process) -> None:
        self._server = server
        self.whole = self.loop = self.wall = 0.0
        self.sleeps = 0

    def _now(self) -> tuple[float, float, float, int]:
        t = self._server.cpu_times()
        main = next(x for x in self._server.threads() if x.id == self._server.pid)
        return (
            time.perf_counter(),
            t.user + t.system,
            main.user_time + main.system_time,
            loop_sleeps(self._server.pid),
        )

    async def timed(self, span: Callable[[], Awaitable[Any]]) -> Any:
        w0, c0, m0, s0 = self._now()
        out = await span()
        w1, c1, m1, s1 = self._now()
        self.wall += w1 - w0
        self.whole += c1 - c0
        self.loop += m1 - m0
        self.sleeps += s1 - s0
        return out


def _figures(
    shape: str,
    k: int,
    latencies: list[float],
    bursts: list[float],
    rate: float,
    cpu: _Cpu,
    receives: list[float],
) -> AckFigures:
    ordered = sorted(latencies)
    return AckFigures(
        shape=shape,
        receivers=k,
        acks=len(ordered),
        p50_ms=round(statistics.median(ordered), 2),
        p99_ms=round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
        max_ms=round(ordered[-1], 2),
        burst_ms=round(statistics.median(bursts), 2),
        receive_p50_ms=round(statistics.median(receives), 2) if receives else 0.0,
        acked_per_s=round(rate, 1),
        server_cpu=round(cpu.whole / cpu.wall, 3),
        loop_cpu=round(cpu.loop / cpu.wall, 3),
        loop_sleeps=round(cpu.sleeps / len(ordered), 2),
    )


async def busy(stub: Any, server: psutil.Process, k: int, rounds: int) -> AckFigures:
    """K consumers of one group, each receiving 32 and acking them at once, over a
    backlog of ``k * rounds * 32`` messages due now."""
    topic, group = _name(), _name()
    total = k * rounds * BATCH
    await _send(stub, topic, total)
    latencies: list[float] = []
    bursts: list[float] = []
    receives: list[float] = []
    left = [total]
    done = asyncio.Event()

    async def consume() -> None:
        req = _receive_request(topic, group, 2)
        while True:
            began = time.perf_counter()
            got = await _receive(stub, req, 2)
            if got:
                receives.append((time.perf_counter() - began) * 1000)
                began = time.perf_counter()
                latencies.extend(await _acks(stub, topic, group, got))
                bursts.append((time.perf_counter() - began) * 1000)
                left[0] -= len(got)
                if left[0] <= 0:
                    done.set()

    async def all_consumed() -> None:
        consumers = [asyncio.create_task(consume()) for _ in range(k)]
        finished = asyncio.create_task(done.wait())
        await asyncio.wait([finished, *consumers], return_when=asyncio.FIRST_COMPLETED)
        for task in consumers:  # the others wait in a receive: nothing is left
            task.cancel()
        finished.cancel()
        for out in await asyncio.gather(*consumers, return_exceptions=True):
            if not isinstance(out, asyncio.CancelledError):
                raise RuntimeError("a consumer failed") from out

    cpu = _Cpu(server)
    await cpu.timed(all_consumed)
    return _figures("busy", k, latencies, bursts, total / cpu.wall, cpu, receives)


async def idle(
    stub: Any, server: psutil.Process, k: int, rounds: int, receives: int = 1
) -> AckFigures:
    """The acks of ``receives`` receives of 32 sent at once, ``rounds`` times, while
    K receivers long-poll an idle group."""
    idle_topic, idle_group = _name(), _name()

    async def poll_forever() -> None:
        req = _receive_request(idle_topic, idle_group, POLL_S)
        while True:
            await _receive(stub, req, POLL_S)

    polls = [asyncio.create_task(poll_forever()) for _ in range(k)]
    await asyncio.sleep(0.5)  # every poll waits in the server
    latencies: list[float] = []
    bursts: list[float] = []
    cpu = _Cpu(server)
    try:
        for _ in range(rounds):
            topic, group = _name(), _name()
            await _send(stub, topic, receives * BATCH)
            got: list[rmq.Message] = []
            while len(got) < receives * BATCH:
                got += await _receive(stub, _receive_request(topic, group, 5), 5)
            await asyncio.sleep(0.05)  # the receive's own work is over
            began = time.perf_counter()
            latencies += await cpu.timed(functools.partial(_acks, stub, topic, group, got))
            bursts.append((time.perf_counter() - began) * 1000)
    finally:
        for p in polls:
            p.cancel()
        await asyncio.gather(*polls, return_exceptions=True)
    return _figures("idle", k, latencies, bursts, 0.0, cpu, [])


async def measure(
    address: str, pid: int, shape: str, receivers: list[int], rounds: int, together: int = 1
) -> list[AckFigures]:
    """Each K's figures against the RocketMQ port at ``address`` of server ``pid``
    (``together``: the idle shape's receives acked at once)."""

    async def run(stub: Any, server: psutil.Process, k: int, n: int) -> AckFigures:
        if shape == "busy":
            return await busy(stub, server, k, n)
        return await idle(stub, server, k, n, together)

    server = psutil.Process(pid)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = svc_grpc.MessagingServiceStub(channel)
        await run(stub, server, 1, 2)  # warm-up: topics, code paths
        return [await run(stub, server, k, rounds) for k in receivers]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.ackstall",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--shape", default="busy", choices=("busy", "idle"))
    ap.add_argument("--receivers", help="the K to measure (default: busy 1,4,8; idle 0,1,4,8)")
    ap.add_argument("--rounds", type=int, default=12, help="receives acked per receiver (busy)")
    ap.add_argument("--together", type=int, default=1, help="receives acked at once (idle)")
    ap.add_argument("--flush", default="async", choices=("async", "sync"))
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args(argv)
    default = "1,4,8" if args.shape == "busy" else "0,1,4,8"
    ks = [int(k) for k in (args.receivers or default).split(",")]
    with tempfile.TemporaryDirectory(prefix="ackstall-") as tmp:
        proc, line = spawn_delayq_line(
            Path(tmp) / "data", "--rocketmq-listen", "127.0.0.1:0", "--flush", args.flush
        )
        try:
            address = served_address(line, "rocketmq")
            run = measure(address, proc.pid, args.shape, ks, args.rounds, args.together)
            figures = asyncio.run(run)
        finally:
            stop_process(proc, signal.SIGTERM)
    print(f"{BATCH} concurrent AckMessage a receive, shape {args.shape}, flush {args.flush}")
    print(
        f"{'K':>3} {'acks':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'burst ms':>9}"
        f" {'receive ms':>11}"
        f" {'acked/s':>8} {'server CPU':>11} {'loop CPU':>9} {'sleeps/ack':>11}"
    )
    for f in figures:
        print(
            f"{f.receivers:>3} {f.acks:>5} {f.p50_ms:>8.1f} {f.p99_ms:>8.1f} {f.max_ms:>8.1f}"
            f" {f.burst_ms:>9.1f} {f.receive_p50_ms:>11.1f} {f.acked_per_s:>8.0f}"
            f" {f.server_cpu:>11.0%} {f.loop_cpu:>9.0%}"
            f" {f.loop_sleeps:>11.2f}"
        )
    if args.json:
        args.json.write_text(json.dumps([asdict(f) for f in figures], indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
