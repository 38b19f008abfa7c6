"""The asyncio side of the client's I/O, for ``aio.py``: sleeping, dialling, sending
calls concurrently, receive polls, and merging per-shard streams.

Invariant: ``_sync_io`` has the same names with the same meaning, blocking; the
sync client (``sync.py``) is ``aio.py`` with ``_aio_io`` read as ``_sync_io``
(``scripts/gen_sync_client.py``), so everything that differs between the two
lives in these two small modules.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, Generic, TypeVar

import grpc

from ..tls import TlsConfig, dial_aio
from . import core
from .core import Received
from .shell import ShellState

__all__ = ["ClientBase", "Event", "Merge", "Polls", "call_all", "close_channel", "dial", "pause"]

T = TypeVar("T")
sleep = asyncio.sleep
Event = asyncio.Event


def dial(address: str, tls: TlsConfig | None, options: Any = None) -> grpc.aio.Channel:
    return dial_aio(address, tls, options)


async def close_channel(channel: Any) -> None:
    await channel.close()


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds``, or less when ``stop`` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def call_all(calls: Sequence[tuple[Any, Any]], timeout_s: float) -> list[Any]:
    """Each ``(method, request)`` sent concurrently: its response, or its gRPC error."""

    async def one(method: Any, request: Any) -> Any:
        try:
            return await method(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            return exc

    if len(calls) == 1:
        return [await one(*calls[0])]
    return list(await asyncio.gather(*(one(m, r) for m, r in calls)))


class Polls:
    """Receive polls in flight (``FanIn``'s handles): asyncio tasks."""

    ended = 0  # a task says itself when it is done: ``wait`` needs no count

    def start(self, method: Any, request: Any, timeout_s: float | None) -> Any:
        return asyncio.ensure_future(method(request, timeout=timeout_s))

    async def wait(self, handles: list[Any], seen: int, timeout_s: float) -> None:
        """Until one of ``handles`` ends, or ``timeout_s``."""
        await asyncio.wait(handles, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)

    @staticmethod
    def outcome(task: Any) -> Sequence[Received] | grpc.RpcError:
        """A finished poll's messages, or its error (one the client cancelled on
        close brought nothing)."""
        if task.cancelled():
            return []
        try:
            return core.received(task.result())
        except grpc.RpcError as exc:
            return exc

    @staticmethod
    def epoch(task: Any) -> int:
        """The shard-map epoch a finished poll's answer named (0: none)."""
        if task.cancelled() or task.exception() is not None:
            return 0
        return int(task.result().topology_epoch)


_END = object()


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Merge(Generic[T]):
    """Items of several async iterators as they come, through a queue of ``bound``
    (a slow reader slows the sources, through gRPC flow control, instead of piling
    up batches whose invisibility runs out while they wait). A source's error is
    raised to the reader. ``add`` may be called while merging."""

    def __init__(self, bound: int) -> None:
        self._queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=max(1, bound))
        self._tasks: list[asyncio.Future[None]] = []
        self._open = 0
        self._closed = False

    def add(self, source: AsyncIterator[T]) -> None:
        if self._closed:
            return
        self._open += 1
        self._tasks.append(asyncio.ensure_future(self._pump(source)))

    async def _pump(self, source: AsyncIterator[T]) -> None:
        try:
            async for item in source:
                await self._queue.put(item)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # handed to the reader, who raises it
            await self._queue.put(_Failed(exc))
        await self._queue.put(_END)

    async def __aiter__(self) -> AsyncIterator[T]:
        while self._open:
            got = await self._queue.get()
            if self._closed:
                return
            if got is _END:
                self._open -= 1
            elif isinstance(got, _Failed):
                raise got.exc
            else:
                yield got

    async def close(self) -> None:
        self._closed = True
        with contextlib.suppress(asyncio.QueueFull):  # wakes a reader waiting on an empty queue
            self._queue.put_nowait(_END)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class ClientBase(ShellState):
    """What only the asyncio client has (nothing yet)."""
