"""``delayq.AsyncClient``: the asyncio shell over ``client.core`` (grpc.aio)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import grpc

from ..addresses import check_target
from ..shardmap import ShardMap, ShardMapError
from ..tls import TlsConfig, dial_aio
from ..v1 import delayq_pb2 as pb
from . import core, routing
from .core import Outgoing, Received, RetryPolicy, Scheduled
from .fanin import FanIn
from .shell import ShellState

__all__ = ["AsyncClient"]

R = TypeVar("R")


def _poll_outcome(task: Any) -> list[Received] | grpc.RpcError:
    """A finished receive poll's messages, or its error (a poll the client
    cancelled on close brought nothing)."""
    if task.cancelled():
        return []
    try:
        return core.received(task.result())
    except grpc.aio.AioRpcError as exc:
        return exc


def _poll_epoch(task: Any) -> int:
    """The shard-map epoch a finished receive poll's answer named (0: none)."""
    if task.cancelled() or task.exception() is not None:
        return 0
    return int(task.result().topology_epoch)


class AsyncClient(ShellState):
    """The asyncio twin of ``Client``: same routing, fan-in and retries."""

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
            address, timeout_s, retry, dial_aio(address, tls), functools.partial(dial_aio, tls=tls)
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        for fan in self._fanins.values():  # polls in flight end; what they held comes again
            for poll in fan.inflight.values():
                poll.handle.cancel()
        for channel in self._channels:
            await channel.close()

    async def refresh_route(self, first: str | None = None) -> ShardMap:
        """Fetch the shard map again: from ``first`` when given, else the address
        given, else any node known (the client does this on first use and when a
        node says so)."""
        error: grpc.aio.AioRpcError | None = None
        for address in self._route_sources(first):
            try:
                resp = await self._cached_stub(address).GetRoute(
                    pb.GetRouteRequest(), timeout=self.timeout_s
                )
            except grpc.aio.AioRpcError as exc:
                error = exc
                continue
            return self._take_route(routing.route_of(resp))
        assert error is not None
        raise error

    async def _table(self, deadline_s: float | None = None) -> ShardMap:
        """The map held, else fetched (retried like a call until ``deadline_s``:
        a node that is recovering answers UNAVAILABLE for a while)."""
        deadline_s = deadline_s or time.monotonic() + self.timeout_s
        attempt = 0
        while self._routes is None:
            attempt += 1
            try:
                return await self.refresh_route()
            except grpc.aio.AioRpcError as exc:
                await asyncio.sleep(self._route_retry_s(exc, attempt, deadline_s))
        return self._routes

    async def _refresh_quietly(self, first: str | None = None) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError, ShardMapError):
            await self.refresh_route(first)

    async def _send(
        self, route: ShardMap, steps: list[routing.Step[R]], timeout_s: float
    ) -> list[Any]:
        """Each step's parsed results or its error; steps run concurrently, each
        within ``timeout_s`` (what is left of the call's deadline) at most."""

        async def one(step: routing.Step[R]) -> tuple[Any, Any]:
            method = getattr(self._master_stub(route, step.shard), step.call.method)
            try:
                return step, step.call.parse(await method(step.call.request, timeout=timeout_s))
            except grpc.aio.AioRpcError as exc:
                return step, exc

        if len(steps) == 1:
            return [await one(steps[0])]
        return list(await asyncio.gather(*(one(step) for step in steps)))

    async def _routed(self, fan: routing.Fanout[Any, R]) -> list[R]:
        while True:
            route = await self._table(fan.deadline_s)
            steps = fan.plan(route)
            outcomes = await self._send(route, steps, fan.remaining_s(time.monotonic()))
            wait = fan.settle(outcomes, time.monotonic())
            if fan.stale_route:
                await self._refresh_quietly(fan.ask_first)
            if fan.done:
                return fan.ordered()
            await asyncio.sleep(wait)

    async def _run(self, call: core.Call[R]) -> R:
        """A call to the address given (not routed), with retries."""
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = await getattr(self._stub, call.method)(call.request, timeout=call.timeout_s)
                return call.parse(resp)
            except grpc.aio.AioRpcError as exc:
                wait = self.retry.delay_s(
                    attempt, exc.code(), core.retry_after_ms(exc.trailing_metadata())
                )
                if wait is None:
                    raise
                await asyncio.sleep(wait)

    async def schedule(
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
        m = Outgoing(
            topic=topic, body=body, at=at, delay=delay, level=level, key=key, headers=headers or {}
        )
        return (await self.schedule_many([m]))[0]

    async def schedule_many(self, messages: Sequence[Outgoing]) -> list[Scheduled]:
        """Schedule a batch, split by owning shard (keyless messages: one shard per
        call, in turn). Results come in the batch's order."""
        return await self._routed(self.fanout_schedule(messages))

    async def cancel(self, *ids: str) -> list[str]:
        return await self._routed(self.fanout_cancel(ids))

    async def reschedule(
        self,
        message_id: str,
        *,
        at: datetime | int | None = None,
        delay: timedelta | float | None = None,
    ) -> Scheduled:
        call = core.reschedule(message_id, at, delay, self.timeout_s)  # checks at/delay first
        return (await self._routed(self.fanout_by_id(message_id, lambda _: call)))[0]

    async def lookup(self, message_id: str) -> dict[str, Any]:
        make = functools.partial(core.lookup, timeout_s=self.timeout_s)
        return (await self._routed(self.fanout_by_id(message_id, make)))[0]

    async def receive(
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
        route = await self._table()
        call = core.receive(
            topic,
            group,
            FanIn.share(route.count, max_messages),
            wait_s,
            invisible_s,
            self.timeout_s,
            auto_ack,
        )
        if route.count == 1:
            return (await self._routed(self.fanout_shards(1, lambda: call, call.timeout_s)))[0]
        fan = self._fanin(topic, group, invisible_s, auto_ack)
        fan.begin()
        now = time.monotonic()
        if not fan.buffered(now):
            for shard in fan.idle(route.count):
                stub = self._master_stub(route, shard)
                task = asyncio.ensure_future(stub.Receive(call.request, timeout=call.timeout_s))
                fan.sent(shard, task, now)
        deadline = now + wait_s + self.timeout_s
        while True:
            now = time.monotonic()
            fan.harvest(_poll_outcome, _poll_epoch)
            if fan.buffered(now) or not fan.inflight or now >= deadline:
                break
            await asyncio.wait(
                [poll.handle for poll in fan.inflight.values()],
                timeout=deadline - now,
                return_when=asyncio.FIRST_COMPLETED,
            )
        taken = fan.take(max_messages, time.monotonic())
        failure = None if taken else fan.failure()
        if fan.stale_route(route.topology_epoch):
            await self._refresh_quietly()
        if failure is not None:
            raise failure
        return taken

    async def subscribe(
        self,
        topic: str,
        group: str,
        *,
        max_messages: int = 1000,
        wait_s: float = 1.0,
        invisible_s: float = 30.0,
        auto_ack: bool = False,
    ) -> AsyncIterator[list[Received]]:
        """Batches of due messages pushed by every shard as they come due, merged
        into one stream; leaving the ``async for`` (break, or ``aclose()``) cancels
        the streams."""
        call = core.subscribe(topic, group, max_messages, wait_s, invisible_s, auto_ack)
        route = await self._table()
        streams = [
            self._master_stub(route, shard).Subscribe(call.request) for shard in range(route.count)
        ]
        # bounded: a slow reader slows the streams (gRPC flow control) instead of
        # piling up batches whose invisibility runs out while they wait here
        merged: asyncio.Queue[Any] = asyncio.Queue(maxsize=len(streams))
        end = object()

        async def pump(stream: Any) -> None:
            try:
                async for resp in stream:
                    await merged.put(call.parse(resp))
            except Exception as exc:  # handed to the reader, who raises it
                await merged.put(exc)
            finally:
                await merged.put(end)

        pumps = [asyncio.ensure_future(pump(s)) for s in streams]
        try:
            open_streams = len(pumps)
            while open_streams:
                got = await merged.get()
                if got is end:
                    open_streams -= 1
                elif isinstance(got, BaseException):
                    raise got
                else:
                    yield got
        finally:
            for stream in streams:
                stream.cancel()
            for p in pumps:
                p.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)

    async def ack(self, topic: str, group: str, receipts: Sequence[str]) -> list[str]:
        return await self._routed(
            self.fanout_settle(receipts, lambda part: core.ack(topic, group, part, self.timeout_s))
        )

    async def change_invisibility(
        self, topic: str, group: str, receipts: Sequence[str], invisible_s: float
    ) -> list[str]:
        def make(part: Sequence[str]) -> core.Call[list[str]]:
            return core.change_invisibility(topic, group, part, invisible_s, self.timeout_s)

        return await self._routed(self.fanout_settle(receipts, make))

    async def stats(self, topic: str = "") -> dict[str, Any]:
        """Stats of every shard: summed per topic, with each shard's own under
        ``shards`` (see ``routing.merge_stats``)."""
        route = await self._table()
        per_shard = await self._routed(
            self.fanout_shards(route.count, lambda: core.stats(topic, self.timeout_s))
        )
        return routing.merge_stats(per_shard)

    async def route(self, topic: str = "") -> Any:
        """The GetRoute reply of the address given."""
        return await self._run(core.route(topic, self.timeout_s))
