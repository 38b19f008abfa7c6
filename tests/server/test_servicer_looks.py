"""The servicer's looks for ready messages (Receive, Subscribe) over a real engine on
the real clock: a stream looks again at once only after a full batch, else only
once the engine signals a release, and never misses one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from delayq import Engine, SystemClock
from delayq.engine import ReceivedBatch, ScheduleBatch
from delayq.server import consuming as consuming_module
from delayq.server.calls import Calls
from delayq.server.servicer import DelayQueueServicer
from delayq.server.topology import Topology
from delayq.v1 import delayq_pb2 as pb
from tests.support.engines import small_settings


def _counting(calls: Calls) -> list[int]:
    """Record the size of every look the calls layer makes."""
    sizes: list[int] = []
    take: Callable[..., ReceivedBatch] = calls.consuming._receive

    def counted(*args: Any) -> ReceivedBatch:
        got = take(*args)
        sizes.append(len(got.ids))
        return got

    calls.consuming._receive = counted  # type: ignore[method-assign]
    return sizes


def _schedule_now(engine: Engine, n: int) -> None:
    at = time.time_ns() // 1_000_000
    engine.schedule_batch(ScheduleBatch(topic="t", bodies=[b"x"] * n, deliver_at_ms=[at] * n))


Test = Callable[[Engine, Calls, DelayQueueServicer], Awaitable[None]]


def _serve(tmp_path: Path, test: Test) -> None:
    """Run ``test`` on an event loop with a servicer over a real engine (real clock,
    own threads); shut both down afterwards."""
    engine = Engine(small_settings(tmp_path / "data"), SystemClock()).start()

    async def main() -> None:
        calls = Calls(engine, Topology(None, 0, "127.0.0.1:0"), threads=2)
        svc = DelayQueueServicer(calls, "127.0.0.1:0")
        try:
            await test(engine, calls, svc)
        finally:
            calls.shutdown()

    try:
        asyncio.run(main())
    finally:
        engine.close()


def test_a_stream_looks_again_at_once_after_a_full_batch_else_only_when_signalled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no periodic look within the test: every look after the first is the servicer's
    # own choice (a full batch) or the engine's signal
    monkeypatch.setattr(consuming_module, "RECEIVE_LOOK_AGAIN_S", 30.0)

    async def test(engine: Engine, calls: Calls, svc: DelayQueueServicer) -> None:
        sizes = _counting(calls)
        request = pb.ReceiveRequest(topic="t", group="g", max_messages=2, auto_ack=True)
        stream = svc.Subscribe(request, None)  # type: ignore[arg-type]
        try:
            _schedule_now(engine, 5)
            while engine.observing.counters["delivered"] < 5:  # released before the stream starts
                await asyncio.sleep(0.01)
            async with asyncio.timeout(10):
                got = [len((await anext(stream)).messages) for _ in range(3)]
            # a full look is followed at once by another; a short one by a wait
            assert got == [2, 2, 1] and sizes == [2, 2, 1]

            _schedule_now(engine, 1)  # released later: only the signal can wake the stream
            async with asyncio.timeout(10):
                assert len((await anext(stream)).messages) == 1
            assert sizes[3:] == [1], "one look, made on the release's signal, none empty"
        finally:
            await stream.aclose()
        assert calls.consuming._ready.waiting == 0, "a closed stream no longer counts as waiting"

    _serve(tmp_path, test)


def test_a_receive_returns_the_first_batch_within_its_wait_or_empty_when_it_ends(
    tmp_path: Path,
) -> None:
    async def test(engine: Engine, calls: Calls, svc: DelayQueueServicer) -> None:
        wait = pb.ReceiveRequest(topic="t", group="g", max_messages=10, wait_ms=100)
        empty = await svc.Receive(wait, None)  # type: ignore[arg-type]
        assert list(empty.messages) == []

        waiting = asyncio.create_task(
            svc.Receive(  # type: ignore[arg-type]
                pb.ReceiveRequest(topic="t", group="g", max_messages=10, wait_ms=5000),
                None,
            )
        )
        await asyncio.sleep(0.05)
        _schedule_now(engine, 3)
        async with asyncio.timeout(10):
            assert len((await waiting).messages) == 3
        assert calls.consuming._ready.waiting == 0

    _serve(tmp_path, test)
