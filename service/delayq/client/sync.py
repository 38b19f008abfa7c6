"""``delayq.Client``: the blocking shell over ``client.core``, plus ``Producer``,
which coalesces single sends into batches on a background thread.

Thread-safety: a Client may be shared by threads (gRPC channels are); a
Producer is safe to ``send`` from many threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from datetime import datetime, timedelta
from typing import Any, TypeVar

import grpc

from ..addresses import check_target
from . import core
from .core import Outgoing, Received, RetryPolicy, Scheduled
from .shell import ShellState

__all__ = ["Client", "Producer"]

R = TypeVar("R")


class Client(ShellState):
    """Blocking client of one delayq endpoint (the shard map has one shard so far;
    ``route()`` shows it)."""

    def __init__(
        self,
        address: str = "127.0.0.1:7420",
        *,
        timeout_s: float = 10.0,
        retry: RetryPolicy | None = None,
    ) -> None:
        check_target(address)  # gRPC would dial a port out of range wrapped
        super().__init__(
            address, timeout_s, retry, grpc.insecure_channel(address), grpc.insecure_channel
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for channel in self._channels:
            channel.close()

    def refresh_route(self) -> core.RouteTable:
        """Fetch the shard map again (the client does this on first use)."""
        self._routes = core.RouteTable.from_response(self.route())
        return self._routes

    def _stub_for(self, shard: int) -> Any:
        return self._cached_stub((self._routes or self.refresh_route()).masters[shard])

    def _run(self, call: core.Call[R], shard: int | None = None) -> R:
        stub = self._stub if shard is None else self._stub_for(shard)
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = getattr(stub, call.method)(call.request, timeout=call.timeout_s)
                return call.parse(resp)
            except grpc.RpcError as exc:
                wait = self.retry.delay_s(
                    attempt, exc.code(), core.retry_after_ms(exc.trailing_metadata())
                )
                if wait is None:
                    raise
                time.sleep(wait)

    # -- messages
    def schedule(
        self,
        topic: str,
        body: bytes,
        *,
        at: datetime | int | None = None,
        delay: timedelta | float | None = None,
        level: int | None = None,
        key: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> Scheduled:
        """Schedule one message; ``at`` (aware datetime or epoch ms), ``delay`` (seconds)
        or ``level`` (RocketMQ delay level 1..N of the server's ``--delay-levels``)."""
        m = Outgoing(
            topic=topic, body=body, at=at, delay=delay, level=level, key=key, headers=headers or {}
        )
        return self.schedule_many([m])[0]

    def schedule_many(self, messages: Sequence[Outgoing]) -> list[Scheduled]:
        return self._run(core.schedule(messages, self.timeout_s))

    def cancel(self, *ids: str) -> list[str]:
        return self._run(core.cancel(ids, self.timeout_s))

    def reschedule(
        self,
        message_id: str,
        *,
        at: datetime | int | None = None,
        delay: timedelta | float | None = None,
    ) -> Scheduled:
        return self._run(core.reschedule(message_id, at, delay, self.timeout_s))

    def lookup(self, message_id: str) -> dict[str, Any]:
        return self._run(core.lookup(message_id, self.timeout_s))

    # -- consumers
    def receive(
        self,
        topic: str,
        group: str,
        *,
        max_messages: int = 32,
        wait_s: float = 0.0,
        invisible_s: float = 30.0,
        auto_ack: bool = False,
    ) -> list[Received]:
        """Up to ``max_messages`` due messages for ``group``, long-polling ``wait_s``.
        Ack them by receipt, or pass ``auto_ack`` to have them acked as they are
        handed out (at-most-once: no receipts, never redelivered)."""
        return self._run(
            core.receive(topic, group, max_messages, wait_s, invisible_s, self.timeout_s, auto_ack)
        )

    def subscribe(
        self,
        topic: str,
        group: str,
        *,
        max_messages: int = 1000,
        wait_s: float = 1.0,
        invisible_s: float = 30.0,
        auto_ack: bool = False,
    ) -> Subscription:
        """Batches of due messages pushed by the server as they come due (no request
        per batch). Iterate the result; ``cancel()`` or leave its ``with`` to stop."""
        call = core.subscribe(topic, group, max_messages, wait_s, invisible_s, auto_ack)
        return Subscription(self._stub.Subscribe(call.request), call.parse)

    def ack(self, topic: str, group: str, receipts: Sequence[str]) -> list[str]:
        return self._run(core.ack(topic, group, receipts, self.timeout_s))

    def change_invisibility(
        self, topic: str, group: str, receipts: Sequence[str], invisible_s: float
    ) -> list[str]:
        return self._run(
            core.change_invisibility(topic, group, receipts, invisible_s, self.timeout_s)
        )

    # -- cluster
    def stats(self, topic: str = "") -> dict[str, Any]:
        return self._run(core.stats(topic, self.timeout_s))

    def route(self, topic: str = "") -> Any:
        return self._run(core.route(topic, self.timeout_s))

    def producer(self, *, max_batch: int = 100, linger_s: float = 0.005) -> Producer:
        return Producer(self, max_batch=max_batch, linger_s=linger_s)


class Subscription:
    """An open Subscribe stream: iterating yields one ``list[Received]`` per batch."""

    def __init__(self, stream: Any, parse: Callable[[Any], list[Received]]) -> None:
        self._stream = stream
        self._parse = parse
        self._cancelled = False

    def __iter__(self) -> Iterator[list[Received]]:
        try:
            for resp in self._stream:
                yield self._parse(resp)
        except grpc.RpcError as exc:
            if not (self._cancelled and exc.code() is grpc.StatusCode.CANCELLED):
                raise

    def cancel(self) -> None:
        self._cancelled = True
        self._stream.cancel()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


class Producer:
    """Coalesces ``send`` calls into ``Schedule`` batches of up to ``max_batch``,
    waiting at most ``linger_s`` for a batch to fill. ``send`` returns a Future of
    the message's ``Scheduled``; ``flush()`` waits for everything sent so far."""

    def __init__(self, client: Client, *, max_batch: int = 100, linger_s: float = 0.005) -> None:
        self._client = client
        self._max = max_batch
        self._linger = linger_s
        self._lock = threading.Condition()  # guards _queue/_closed; the sender waits on it
        self._queue: list[tuple[Outgoing, Future[Scheduled]]] = []
        self._inflight = 0
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="delayq-producer", daemon=True)
        self._thread.start()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(
        self,
        topic: str,
        body: bytes,
        *,
        at: datetime | int | None = None,
        delay: timedelta | float | None = None,
        level: int | None = None,
        key: str = "",
        headers: Mapping[str, str] | None = None,
    ) -> Future[Scheduled]:
        fut: Future[Scheduled] = Future()
        m = Outgoing(
            topic=topic, body=body, at=at, delay=delay, level=level, key=key, headers=headers or {}
        )
        with self._lock:
            if self._closed:
                raise RuntimeError("producer is closed")
            self._queue.append((m, fut))
            if len(self._queue) >= self._max:
                self._lock.notify()
        return fut

    def flush(self) -> None:
        with self._lock:
            self._lock.notify()
            while self._queue or self._inflight:
                self._lock.wait(0.05)

    def close(self) -> None:
        self.flush()
        with self._lock:
            self._closed = True
            self._lock.notify()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    if self._closed:
                        return
                    self._lock.wait(0.1)
                    continue
                if len(self._queue) < self._max and not self._closed:
                    self._lock.wait(self._linger)
                batch, self._queue = self._queue[: self._max], self._queue[self._max :]
                self._inflight += 1
            try:
                results = self._client.schedule_many([m for m, _ in batch])
                for (_, fut), res in zip(batch, results, strict=True):
                    fut.set_result(res)
            except Exception as exc:  # the batch failed after retries: every sender learns it
                for _, fut in batch:
                    fut.set_exception(exc)
            finally:
                with self._lock:
                    self._inflight -= 1
                    self._lock.notify_all()
