"""The blocking side of the client's I/O, for ``sync.py``: the names of
``_aio_io`` with the same meaning, on threads and gRPC futures.

Invariant: every name ``_aio_io`` exports is here with the same signature less
``async`` (``scripts/gen_sync_client.py`` generates ``sync.py`` from ``aio.py``
by reading ``_aio_io`` as this module). ``ClientBase`` adds what only the
blocking client has: ``producer()``.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar, cast

import grpc

from ..tls import TlsConfig
from ..tls import dial as _dial
from . import core
from .core import Received
from .producer import Producer, Schedules
from .shell import ShellState

__all__ = ["ClientBase", "Event", "Merge", "Polls", "call_all", "close_channel", "dial", "pause"]

T = TypeVar("T")
sleep = time.sleep
Event = threading.Event


def dial(address: str, tls: TlsConfig | None, options: Any = None) -> grpc.Channel:
    return _dial(address, tls, options)


def close_channel(channel: Any) -> None:
    channel.close()


def pause(stop: threading.Event, seconds: float) -> None:
    """Wait ``seconds``, or less when ``stop`` is set."""
    stop.wait(seconds)


def call_all(calls: Sequence[tuple[Any, Any]], timeout_s: float) -> list[Any]:
    """Each ``(method, request)`` sent concurrently: its response, or its gRPC error."""
    if len(calls) == 1:
        method, request = calls[0]
        try:
            return [method(request, timeout=timeout_s)]
        except grpc.RpcError as exc:
            return [exc]
    futures = [method.future(request, timeout=timeout_s) for method, request in calls]
    out: list[Any] = []
    for fut in futures:
        try:
            out.append(fut.result())
        except grpc.RpcError as exc:
            out.append(exc)
    return out


class Polls:
    """Receive polls in flight (``FanIn``'s handles): gRPC futures; ``ended`` counts
    the polls that ended, so a thread waits until one of anyone's ends."""

    def __init__(self) -> None:
        self.ended = 0
        self._ended = threading.Condition()

    def start(self, method: Any, request: Any, timeout_s: float | None) -> Any:
        fut = method.future(request, timeout=timeout_s)
        fut.add_done_callback(self._end)
        return fut

    def _end(self, _: Any) -> None:
        with self._ended:
            self.ended += 1
            self._ended.notify_all()

    def wait(self, handles: list[Any], seen: int, timeout_s: float) -> None:
        """Until a poll ends (any thread's) after ``ended`` was ``seen``, or ``timeout_s``."""
        with self._ended:
            if self.ended == seen:
                self._ended.wait(timeout_s)

    @staticmethod
    def outcome(fut: Any) -> Sequence[Received] | grpc.RpcError:
        """A finished poll's messages, or its error (one the client cancelled on
        close brought nothing)."""
        try:
            return core.received(fut.result())
        except grpc.RpcError as exc:
            return exc
        except grpc.FutureCancelledError:
            return []

    @staticmethod
    def epoch(fut: Any) -> int:
        """The shard-map epoch a finished poll's answer named (0: none)."""
        try:
            return int(fut.result().topology_epoch)
        except (grpc.RpcError, grpc.FutureCancelledError):
            return 0


_END = object()


class _Failed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class Merge(Generic[T]):
    """Items of several iterators as they come, each read on a thread of its own,
    through a queue of ``bound`` (a slow reader slows the sources, through gRPC
    flow control). A source's error is raised to the reader. ``add`` may be called
    while merging, from any thread."""

    def __init__(self, bound: int) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=max(1, bound))
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._open = 0
        self._closed = False

    def add(self, source: Iterator[T]) -> None:
        with self._lock:
            if self._closed:
                return
            self._open += 1
            thread = threading.Thread(
                target=self._pump, args=(source,), name="delayq-subscribe", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def _put(self, item: Any) -> bool:
        while not self._closed:
            with contextlib.suppress(queue.Full):
                self._queue.put(item, timeout=0.1)
                return True
        return False

    def _pump(self, source: Iterator[T]) -> None:
        try:
            for item in source:
                if not self._put(item):
                    return
        except Exception as exc:  # handed to the reader, who raises it
            self._put(_Failed(exc))
        self._put(_END)

    def __iter__(self) -> Iterator[T]:
        while True:
            with self._lock:
                if not self._open:
                    return
            got = self._queue.get()
            if self._closed:
                return
            if got is _END:
                with self._lock:
                    self._open -= 1
            elif isinstance(got, _Failed):
                raise got.exc
            else:
                yield got

    def close(self) -> None:
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        with contextlib.suppress(queue.Full):  # wakes a reader waiting on an empty queue
            self._queue.put_nowait(_END)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join()


class ClientBase(ShellState):
    """What only the blocking client has: ``producer()``."""

    def producer(self, *, max_batch: int = 100, linger_s: float = 0.005) -> Producer:
        """A ``Producer`` that coalesces single ``send`` calls into batches."""
        return Producer(cast(Schedules, self), max_batch=max_batch, linger_s=linger_s)
