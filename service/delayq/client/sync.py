"""``delayq.Client``: the blocking shell over ``client.core``, plus ``Producer``,
which coalesces single sends into batches on a background thread.

Thread-safety: a Client may be shared by threads (gRPC channels are); a
Producer is safe to ``send`` from many threads.
"""

from __future__ import annotations

import contextlib
import functools
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from datetime import datetime, timedelta
from typing import Any, TypeVar

import grpc

from ..addresses import check_target
from ..shardmap import ShardMap, ShardMapError
from ..tls import TlsConfig, dial
from ..v1 import delayq_pb2 as pb
from . import core, routing
from .core import Outgoing, Received, RetryPolicy, Scheduled
from .fanin import FanIn
from .shell import CHANNEL_OPTIONS, ShellState

__all__ = ["Client", "Producer"]

R = TypeVar("R")


class Client(ShellState):
    """Blocking client of a delayq cluster, given any one node's address: it
    fetches the shard map from it and routes every call (see ``client.routing``);
    receive and subscribe fan in from every shard. A node serving alone is a
    cluster of one shard."""

    def __init__(
        self,
        address: str = "127.0.0.1:7420",
        *,
        timeout_s: float = 10.0,
        retry: RetryPolicy | None = None,
        tls: TlsConfig | None = None,
    ) -> None:
        """``tls``: dial every node over TLS (``delayq.tls``); None: plaintext."""
        check_target(address)  # gRPC would dial a port out of range wrapped
        super().__init__(
            address,
            timeout_s,
            retry,
            dial(address, tls, CHANNEL_OPTIONS),
            functools.partial(dial, tls=tls),
        )
        self._fan_lock = threading.Lock()  # the fan-ins' buffers and polls in flight
        self._polled = threading.Condition()  # notified whenever a poll ends
        self._polls_ended = 0

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._fan_lock:  # polls in flight end; what they held comes again later
            for fan in self._fanins.values():
                for poll in fan.inflight.values():
                    poll.handle.cancel()
        for channel in self._channels:
            channel.close()

    # -- routing
    def refresh_route(self, first: str | None = None) -> ShardMap:
        """Fetch the shard map again: from ``first`` when given, else the address
        given, else any node known (the client does this on first use and when a
        node says so)."""
        error: grpc.RpcError | None = None
        for address in self._route_sources(first):
            try:
                resp = self._cached_stub(address).GetRoute(
                    pb.GetRouteRequest(), timeout=self.timeout_s
                )
            except grpc.RpcError as exc:
                error = exc
                continue
            return self._take_route(routing.route_of(resp))
        assert error is not None
        raise error

    def _table(self, deadline_s: float | None = None) -> ShardMap:
        """The map held, else fetched (retried like a call until ``deadline_s``:
        a node that is recovering answers UNAVAILABLE for a while)."""
        deadline_s = deadline_s or time.monotonic() + self.timeout_s
        attempt = 0
        while self._routes is None:
            attempt += 1
            try:
                return self.refresh_route()
            except grpc.RpcError as exc:
                time.sleep(self._route_retry_s(exc, attempt, deadline_s))
        return self._routes

    def _refresh_quietly(self, first: str | None = None) -> None:
        with contextlib.suppress(grpc.RpcError, ShardMapError):
            self.refresh_route(first)

    def _send(self, route: ShardMap, steps: list[routing.Step[R]], timeout_s: float) -> list[Any]:
        """Each step's parsed results or its error; steps run concurrently, each
        within ``timeout_s`` (what is left of the call's deadline) at most."""

        def parse(step: routing.Step[R], get: Callable[[], Any]) -> tuple[Any, Any]:
            try:
                return step, step.call.parse(get())
            except grpc.RpcError as exc:
                return step, exc

        calls = [
            (step, getattr(self._master_stub(route, step.shard), step.call.method))
            for step in steps
        ]
        if len(calls) == 1:
            step, method = calls[0]
            return [parse(step, lambda: method(step.call.request, timeout=timeout_s))]
        futures = [(step, m.future(step.call.request, timeout=timeout_s)) for step, m in calls]
        return [parse(step, fut.result) for step, fut in futures]

    def _routed(self, fan: routing.Fanout[Any, R]) -> list[R]:
        while True:
            route = self._table(fan.deadline_s)
            steps = fan.plan(route)
            wait = fan.settle(
                self._send(route, steps, fan.remaining_s(time.monotonic())), time.monotonic()
            )
            if fan.stale_route:
                self._refresh_quietly(fan.ask_first)
            if fan.done:
                return fan.ordered()
            time.sleep(wait)

    def _run(self, call: core.Call[R]) -> R:
        """A call to the address given (not routed), with retries."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return call.parse(
                    getattr(self._stub, call.method)(call.request, timeout=call.timeout_s)
                )
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
        """Schedule a batch, split by owning shard (keyless messages: one shard per
        call, in turn). Results come in the batch's order."""
        return self._routed(self.fanout_schedule(messages))

    def cancel(self, *ids: str) -> list[str]:
        return self._routed(self.fanout_cancel(ids))

    def reschedule(
        self,
        message_id: str,
        *,
        at: datetime | int | None = None,
        delay: timedelta | float | None = None,
    ) -> Scheduled:
        call = core.reschedule(message_id, at, delay, self.timeout_s)  # checks at/delay first
        return self._routed(self.fanout_by_id(message_id, lambda _: call))[0]

    def lookup(self, message_id: str) -> dict[str, Any]:
        make = functools.partial(core.lookup, timeout_s=self.timeout_s)
        return self._routed(self.fanout_by_id(message_id, make))[0]

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
        """Up to ``max_messages`` due messages for ``group``, long-polling ``wait_s``,
        from every shard (see ``client.fanin``). Ack them by receipt, or pass
        ``auto_ack`` to have them acked as they are handed out (at-most-once: no
        receipts, never redelivered)."""
        route = self._table()
        if route.count == 1:
            call = core.receive(
                topic, group, max_messages, wait_s, invisible_s, self.timeout_s, auto_ack
            )
            return self._routed(self.fanout_shards(1, lambda: call, call.timeout_s))[0]
        return self._receive_fanned(
            route, topic, group, max_messages, wait_s, invisible_s, auto_ack
        )

    def _receive_fanned(
        self,
        route: ShardMap,
        topic: str,
        group: str,
        max_messages: int,
        wait_s: float,
        invisible_s: float,
        auto_ack: bool,
    ) -> list[Received]:
        fan = self._fanin(topic, group, invisible_s, auto_ack)
        deadline = time.monotonic() + wait_s + self.timeout_s
        share = FanIn.share(route.count, max_messages)
        call = core.receive(topic, group, share, wait_s, invisible_s, self.timeout_s, auto_ack)
        with self._fan_lock:
            fan.begin()
            now = time.monotonic()
            if not fan.buffered(now):
                for shard in fan.idle(route.count):
                    fut = self._master_stub(route, shard).Receive.future(
                        call.request, timeout=call.timeout_s
                    )
                    fan.sent(shard, fut, now)
                    fut.add_done_callback(self._poll_ended)
        while True:
            with self._fan_lock:
                now = time.monotonic()
                fan.harvest(_poll_outcome, _poll_epoch)
                if fan.buffered(now) or not fan.inflight or now >= deadline:
                    taken = fan.take(max_messages, now)
                    failure = None if taken else fan.failure()
                    break
                seen = self._polls_ended
            with self._polled:  # until a poll ends (any thread's) or the deadline
                if self._polls_ended == seen:
                    self._polled.wait(deadline - now)
        if fan.stale_route(route.topology_epoch):
            self._refresh_quietly()
        if failure is not None:
            raise failure
        return taken

    def _poll_ended(self, _: Any) -> None:
        with self._polled:
            self._polls_ended += 1
            self._polled.notify_all()

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
        """Batches of due messages pushed by every shard as they come due (no request
        per batch), merged into one stream. Iterate the result; ``cancel()`` or leave
        its ``with`` to stop."""
        call = core.subscribe(topic, group, max_messages, wait_s, invisible_s, auto_ack)
        route = self._table()
        streams = [
            self._master_stub(route, shard).Subscribe(call.request) for shard in range(route.count)
        ]
        return Subscription(streams, call.parse)

    def ack(self, topic: str, group: str, receipts: Sequence[str]) -> list[str]:
        return self._routed(
            self.fanout_settle(receipts, lambda part: core.ack(topic, group, part, self.timeout_s))
        )

    def change_invisibility(
        self, topic: str, group: str, receipts: Sequence[str], invisible_s: float
    ) -> list[str]:
        def make(part: Sequence[str]) -> core.Call[list[str]]:
            return core.change_invisibility(topic, group, part, invisible_s, self.timeout_s)

        return self._routed(self.fanout_settle(receipts, make))

    # -- cluster
    def stats(self, topic: str = "") -> dict[str, Any]:
        """Stats of every shard: summed per topic, with each shard's own under
        ``shards`` (see ``routing.merge_stats``)."""
        route = self._table()
        per_shard = self._routed(
            self.fanout_shards(route.count, lambda: core.stats(topic, self.timeout_s))
        )
        return routing.merge_stats(per_shard)

    def route(self, topic: str = "") -> Any:
        """The GetRoute reply of the address given."""
        return self._run(core.route(topic, self.timeout_s))

    def producer(self, *, max_batch: int = 100, linger_s: float = 0.005) -> Producer:
        return Producer(self, max_batch=max_batch, linger_s=linger_s)


def _poll_outcome(fut: Any) -> list[Received] | grpc.RpcError:
    """A finished receive poll's messages, or its error (a poll the client
    cancelled on close brought nothing)."""
    try:
        return core.received(fut.result())
    except grpc.RpcError as exc:
        return exc
    except grpc.FutureCancelledError:
        return []


def _poll_epoch(fut: Any) -> int:
    """The shard-map epoch a finished receive poll's answer named (0: none)."""
    try:
        return int(fut.result().topology_epoch)
    except (grpc.RpcError, grpc.FutureCancelledError):
        return 0


class Subscription:
    """Open Subscribe streams (one per shard), merged: iterating yields one
    ``list[Received]`` per batch of any shard, as they come."""

    _END = object()

    def __init__(self, streams: list[Any], parse: Callable[[Any], list[Received]]) -> None:
        self._streams = streams
        self._parse = parse
        self._cancelled = False

    def __iter__(self) -> Iterator[list[Received]]:
        if len(self._streams) == 1:
            try:
                yield from self._read(self._streams[0])
            finally:
                self.cancel()
            return
        # bounded: a slow reader slows the streams (gRPC flow control) instead of
        # piling up batches whose invisibility runs out while they wait here
        merged: queue.Queue[Any] = queue.Queue(maxsize=len(self._streams))

        def put(item: Any) -> bool:
            while not self._cancelled:
                with contextlib.suppress(queue.Full):
                    merged.put(item, timeout=0.1)
                    return True
            return False

        def pump(stream: Any) -> None:
            try:
                for batch in self._read(stream):
                    if not put(batch):
                        return
            except BaseException as exc:  # handed to the reader, who raises it
                put(exc)
            finally:
                put(self._END)

        threads = [
            threading.Thread(target=pump, args=(s,), name="delayq-subscribe", daemon=True)
            for s in self._streams
        ]
        for t in threads:
            t.start()
        try:
            open_streams = len(threads)
            while open_streams:
                got = merged.get()
                if got is self._END:
                    open_streams -= 1
                elif isinstance(got, BaseException):
                    raise got
                else:
                    yield got
        finally:
            self.cancel()
            for t in threads:
                t.join()

    def _read(self, stream: Any) -> Iterator[list[Received]]:
        try:
            for resp in stream:
                yield self._parse(resp)
        except grpc.RpcError as exc:
            if not (self._cancelled and exc.code() is grpc.StatusCode.CANCELLED):
                raise

    def cancel(self) -> None:
        self._cancelled = True
        for stream in self._streams:
            stream.cancel()

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
