"""``server.nativeserver.NativeServer`` over a loopback port: a server stream that
fills pygrpc-native's one-message read-ahead is sent on by the event loop, a
reader behind by flow control still gets every message in order (the send then
waits on the executor), and a reader that leaves ends the handler's stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from pygrpc_native import STREAM_FULL, STREAM_SENT

from delayq.server.nativeserver import NativeServer, supported

METHOD = "/t.Streams/Count"
WAITED = -1  # a send that waited for room on the executor


class _CountingFront:
    """The server's native front, noting what each stream send answered."""

    def __init__(self, front: Any) -> None:
        self._front = front
        self.answers: list[int] = []

    def stream_try_send(self, call_id: int, payload: bytes) -> int:
        answer: int = self._front.stream_try_send(call_id, payload)
        self.answers.append(answer)
        return answer

    def stream_send(self, call_id: int, payload: bytes) -> bool:
        self.answers.append(WAITED)
        return bool(self._front.stream_send(call_id, payload))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._front, name)


async def _serving(count: int, size: int, ended: asyncio.Event) -> tuple[NativeServer, int]:
    async def numbers(request: bytes, context: Any) -> AsyncIterator[bytes]:
        try:
            for i in range(count):
                yield i.to_bytes(4, "big") + bytes(size)
        finally:
            ended.set()

    server = NativeServer()
    handler = grpc.unary_stream_rpc_method_handler(numbers)
    server.add_registered_method_handlers("t.Streams", {"Count": handler})
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, port


async def _read(count: int, size: int, pause_s: float) -> tuple[list[int], list[int]]:
    ended = asyncio.Event()
    server, port = await _serving(count, size, ended)
    front = server._front = _CountingFront(server._front)
    got: list[int] = []
    try:
        # no BDP probing: the HTTP/2 window stays at 64 KiB, so a slow reader holds
        # the sender back
        options = [("grpc.http2.bdp_probe", 0)]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
            async for message in channel.unary_stream(METHOD)(b"", timeout=30):
                got.append(int.from_bytes(message[:4], "big"))
                assert len(message) == 4 + size
                if pause_s:
                    await asyncio.sleep(pause_s)
        await asyncio.wait_for(ended.wait(), 10)
    finally:
        await server.stop(None)
    return got, front.answers


def test_the_installed_pygrpc_native_has_the_send_this_server_replaces() -> None:
    assert supported(), "pygrpc_native.aio.Server._send changed: see server/nativeserver.py"


def test_a_stream_that_fills_its_read_ahead_is_sent_on_by_the_loop() -> None:
    got, answers = asyncio.run(_read(300, 64, 0))
    assert got == list(range(300))
    # the read-ahead of one message filled, and was mostly sent on by later turns of
    # the loop: the library alone waits on the executor after every full answer
    assert STREAM_FULL in answers
    assert answers.count(WAITED) < answers.count(STREAM_FULL)


def test_a_reader_behind_by_flow_control_gets_every_message_in_order() -> None:
    # 48 messages of 64 KiB read slowly: the HTTP/2 window fills, the loop's tries
    # run out, and the sends wait on the executor
    got, answers = asyncio.run(_read(48, 64 * 1024, 0.005))
    assert got == list(range(48))
    assert WAITED in answers
    assert answers.count(STREAM_SENT) + answers.count(WAITED) == 48


async def _leave_early() -> bool:
    ended = asyncio.Event()
    server, port = await _serving(100_000, 1024, ended)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_stream(METHOD)(b"", timeout=30)
            async for _ in call:
                break
            call.cancel()
        await asyncio.wait_for(ended.wait(), 10)
        return ended.is_set()
    finally:
        await server.stop(None)


def test_a_reader_that_leaves_ends_the_handlers_stream() -> None:
    assert asyncio.run(_leave_early())
