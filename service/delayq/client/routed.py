# GENERATED from aiorouted.py by scripts/gen_sync_client.py: edit that, then run it.
"""``delayq.client.routed.Routed``: ``Client``'s base, its shard map and the
running of its calls; generated from ``aiorouted.py`` (``AsyncRouted``), which
documents it.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, TypeVar

import grpc

from ..shardmap import ShardMap, ShardMapError
from ..v1 import delayq_pb2 as pb
from . import _sync_io as io
from . import core, routing
from .errors import translated

__all__ = ["Routed"]

R = TypeVar("R")


class Routed(io.ClientBase):
    """The shard map and the running of calls, for ``AsyncClient``."""

    def refresh_route(self, first: str | None = None) -> ShardMap:
        """Fetch the shard map again: from ``first`` when given, else the address
        given, else any node known (the client does this on first use and when a
        node says so)."""
        with translated():
            return self._fetch_route(first)

    def _fetch_route(self, first: str | None = None) -> ShardMap:
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
        with translated():
            while self._routes is None:
                attempt += 1
                try:
                    return self._fetch_route()
                except grpc.RpcError as exc:
                    io.sleep(self._route_retry_s(exc, attempt, deadline_s))
        return self._routes

    def _refresh_quietly(self, first: str | None = None) -> None:
        with contextlib.suppress(grpc.RpcError, ShardMapError):
            self._fetch_route(first)

    def _send(self, route: ShardMap, steps: list[routing.Step[R]], timeout_s: float) -> list[Any]:
        """Each step's parsed results or its error; steps run concurrently, each
        within ``timeout_s`` (what is left of the call's deadline) at most."""
        calls = [
            (getattr(self._master_stub(route, step.shard), step.call.method), step.call.request)
            for step in steps
        ]
        answers = io.call_all(calls, timeout_s)
        return [(step, self._parsed(step.call, a)) for step, a in zip(steps, answers, strict=True)]

    def _routed(self, fan: routing.Fanout[Any, R]) -> list[R]:
        with translated():
            while True:
                route = self._table(fan.deadline_s)
                steps = fan.plan(route)
                outcomes = self._send(route, steps, fan.remaining_s(time.monotonic()))
                try:
                    wait = fan.settle(outcomes, time.monotonic())
                finally:  # the call's end too (attempts used up): the next call routes anew
                    if fan.stale_route:
                        self._refresh_quietly(fan.ask_first)
                if fan.done:
                    return fan.ordered()
                io.sleep(wait)

    def _run(self, call: core.Call[R]) -> R:
        """A call to the address given (not routed), with retries."""
        attempt = 0
        with translated():
            while True:
                attempt += 1
                try:
                    method = getattr(self._stub, call.method)
                    return call.parse(method(call.request, timeout=call.timeout_s))
                except grpc.RpcError as exc:
                    wait = self.retry.delay_s(
                        attempt, exc.code(), core.retry_after_ms(exc.trailing_metadata())
                    )
                    if wait is None:
                        raise
                    io.sleep(wait)
