"""``AsyncRouted``: the routing part of ``AsyncClient`` (its base): the shard map
held, fetched (``refresh_route``; retried while a node recovers) and fetched again
when a call's answers say it is stale, a routed call (``routing.Fanout``) planned
on the map, its steps sent to their shards' masters concurrently and settled,
retried until done; and an unrouted call to the address given, with retries.

Invariants: the source of the blocking ``routed.Routed`` (``scripts/gen_sync_client.py``,
as ``aio.py``): no ``asyncio`` here, every I/O difference goes through ``io``
(``_aio_io``/``_sync_io``); gRPC errors leave as ``ClientError`` (``translated``).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, TypeVar

import grpc

from ..shardmap import ShardMap, ShardMapError
from ..v1 import delayq_pb2 as pb
from . import _aio_io as io
from . import core, routing
from .errors import translated

__all__ = ["AsyncRouted"]

R = TypeVar("R")


class AsyncRouted(io.ClientBase):
    """The shard map and the running of calls, for ``AsyncClient``."""

    async def refresh_route(self, first: str | None = None) -> ShardMap:
        """Fetch the shard map again: from ``first`` when given, else the address
        given, else any node known (the client does this on first use and when a
        node says so)."""
        with translated():
            return await self._fetch_route(first)

    async def _fetch_route(self, first: str | None = None) -> ShardMap:
        error: grpc.RpcError | None = None
        for address in self._route_sources(first):
            try:
                resp = await self._cached_stub(address).GetRoute(
                    pb.GetRouteRequest(), timeout=self.timeout_s
                )
            except grpc.RpcError as exc:
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
        with translated():
            while self._routes is None:
                attempt += 1
                try:
                    return await self._fetch_route()
                except grpc.RpcError as exc:
                    await io.sleep(self._route_retry_s(exc, attempt, deadline_s))
        return self._routes

    async def _refresh_quietly(self, first: str | None = None) -> None:
        with contextlib.suppress(grpc.RpcError, ShardMapError):
            await self._fetch_route(first)

    async def _send(
        self, route: ShardMap, steps: list[routing.Step[R]], timeout_s: float
    ) -> list[Any]:
        """Each step's parsed results or its error; steps run concurrently, each
        within ``timeout_s`` (what is left of the call's deadline) at most."""
        calls = [
            (getattr(self._master_stub(route, step.shard), step.call.method), step.call.request)
            for step in steps
        ]
        answers = await io.call_all(calls, timeout_s)
        return [(step, self._parsed(step.call, a)) for step, a in zip(steps, answers, strict=True)]

    async def _routed(self, fan: routing.Fanout[Any, R]) -> list[R]:
        with translated():
            while True:
                route = await self._table(fan.deadline_s)
                steps = fan.plan(route)
                outcomes = await self._send(route, steps, fan.remaining_s(time.monotonic()))
                try:
                    wait = fan.settle(outcomes, time.monotonic())
                finally:  # the call's end too (attempts used up): the next call routes anew
                    if fan.stale_route:
                        await self._refresh_quietly(fan.ask_first)
                if fan.done:
                    return fan.ordered()
                await io.sleep(wait)

    async def _run(self, call: core.Call[R]) -> R:
        """A call to the address given (not routed), with retries."""
        attempt = 0
        with translated():
            while True:
                attempt += 1
                try:
                    method = getattr(self._stub, call.method)
                    return call.parse(await method(call.request, timeout=call.timeout_s))
                except grpc.RpcError as exc:
                    wait = self.retry.delay_s(
                        attempt, exc.code(), core.retry_after_ms(exc.trailing_metadata())
                    )
                    if wait is None:
                        raise
                    await io.sleep(wait)
