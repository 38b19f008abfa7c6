"""The replica's follower loop ends when told to, even when grpc.aio swallows the
cancel (it does in some phases of a call: the stream just ends) — otherwise a
Promote waiting for the loop would never answer."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from delayq import Engine, FakeClock
from delayq.replication import follow
from tests.support.engines import START_MS, small_settings


def refused_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[Engine]:
    e = Engine(small_settings(tmp_path / "r", replicated=True), FakeClock(START_MS))
    e.replicating.start_as_replica()
    yield e.start()
    e.close()


def test_the_loop_ends_on_stop_while_its_master_is_down(replica: Engine) -> None:
    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(
            follow.follow_master(
                replica.replicating, refused_address(), "r", lambda: 1, lambda _: None, stop
            )
        )
        await asyncio.sleep(0.3)  # a few failed connections and back-offs
        assert not task.done()
        stop.set()  # no cancel: the loop sees it at its next step
        await asyncio.wait_for(task, 5)

    asyncio.run(run())


def test_a_swallowed_cancel_still_ends_the_loop(
    replica: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = 0

    async def stream_swallowing_cancels(*_: object) -> None:
        nonlocal calls
        calls += 1
        try:
            await asyncio.sleep(60)  # a stream waiting for its master
        except asyncio.CancelledError:
            return None  # what grpc.aio does in some phases: the stream "ended"

    monkeypatch.setattr(follow, "_stream", stream_swallowing_cancels)

    async def run() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(
            follow.follow_master(
                replica.replicating, "unused:1", "r", lambda: 1, lambda _: None, stop
            )
        )
        await asyncio.sleep(0.1)
        stop.set()
        task.cancel()
        await asyncio.wait_for(asyncio.wait({task}), 5)
        assert calls == 1, "the loop did not connect again after its stop"

    asyncio.run(run())
