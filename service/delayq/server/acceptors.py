"""A gRPC asyncio server that takes several calls of one method at once
(``AcceptingServer``), where grpc.aio takes them one at a time.

Why: grpc.aio asks the gRPC core for the next call of each method only once it
has taken the previous one (its ``_server_main_loop``: one pending request per
registered method). So a burst of calls to one method (32 AckMessage, one per
message of a RocketMQ receive) is taken one at a time, each waiting for a
round trip: the core's answer crosses from its poller thread to the event loop
(a socketpair write), then several loop turns (grpcio 1.85: a task, an
``asyncio.wait`` over every method's request, grpc/grpc #41796) before the next
request goes out. With 8 RocketMQ consumers acking at once the acks waited
~100-800 ms to be taken while the process' CPU stayed low (``bench.ackstall``).

What: for every unary-request method registered through this server,
``ACCEPTORS`` more requests wait in the core besides grpc.aio's own, each a
loop (an acceptor) that takes a call, hands it to grpc.aio's own per-call path
(``_handle_rpc`` under ``_schedule_rpc_coro``, with the server's interceptors)
and asks again at once: a burst is taken in one round trip. Calls are served
exactly as grpc.aio serves them; only when they are taken changes. Methods
reached through generic handlers only cannot have acceptors (grpc.aio does not
tell Python which method a generic call is for before it serves it), so the
generated ``add_*_to_server`` functions' registered methods are what this needs.

These are grpcio internals (``grpc._cython.cygrpc``). Where this grpcio lacks
them or they take other arguments, the server says so once in the log and
serves as grpc.aio does alone (``supported``).

Not thread-safe: the event loop's.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Sequence
from typing import Any

import grpc
from grpc._cython import cygrpc

__all__ = ["ACCEPTORS", "AcceptingServer", "supported"]

log = logging.getLogger("delayq.server")

ACCEPTORS = 16
"""Requests of each method waiting in the core beside grpc.aio's own: a burst of
up to this many calls is taken in one round trip (a RocketMQ receive's acks: 32,
in two)."""

_SIGNATURES = {
    "_handle_rpc": [
        "method_name",
        "method_resolver",
        "interceptors",
        "rpc_state",
        "loop",
        "concurrency_exceeded",
    ],
    "_schedule_rpc_coro": ["rpc_coro", "rpc_state", "loop", "method_name"],
}


def _internals() -> str | None:
    """What this grpcio lacks of the internals used here (None: nothing)."""
    for name, params in _SIGNATURES.items():
        fn = getattr(cygrpc, name, None)
        try:
            if fn is None or list(inspect.signature(fn).parameters) != params:
                return f"cygrpc.{name}({', '.join(params)})"
        except (TypeError, ValueError):
            return f"cygrpc.{name}'s signature"
    for cls, attr in (("AioServer", "_request_registered_call"), ("AioServer", "is_running")):
        if not hasattr(getattr(cygrpc, cls, None), attr):
            return f"cygrpc.{cls}.{attr}"
    for name in ("_MethodResolver", "_RequestCallError"):
        if not hasattr(cygrpc, name):
            return f"cygrpc.{name}"
    return None


_MISSING = _internals()


def supported() -> bool:
    """Whether this grpcio lets calls be taken several at a time."""
    return _MISSING is None


class AcceptingServer(grpc.aio.Server):  # type: ignore[misc]
    """``server`` (made with ``interceptors``), whose registered methods' calls are
    taken ``acceptors`` at a time more; every other method as ``server`` does."""

    def __init__(
        self,
        server: grpc.aio.Server,
        interceptors: Sequence[grpc.aio.ServerInterceptor],
        acceptors: int = ACCEPTORS,
    ) -> None:
        self._server = server
        self._interceptors = tuple(interceptors)
        self._acceptors = acceptors if supported() else 0
        self._methods: dict[str, grpc.RpcMethodHandler] = {}
        self._loops: set[asyncio.Task[None]] = set()
        self._calls: set[asyncio.Task[Any]] = set()  # grpc.aio holds only weak references

    # -- registration and ports: the server's own
    def add_generic_rpc_handlers(self, generic_rpc_handlers: Sequence[Any]) -> None:
        self._server.add_generic_rpc_handlers(generic_rpc_handlers)

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: dict[str, grpc.RpcMethodHandler]
    ) -> None:
        self._server.add_registered_method_handlers(service_name, method_handlers)
        for method, handler in method_handlers.items():
            if not handler.request_streaming:  # a stream is opened once, not in bursts
                self._methods[f"/{service_name}/{method}"] = handler

    def add_insecure_port(self, address: str) -> int:
        return int(self._server.add_insecure_port(address))

    def add_secure_port(self, address: str, server_credentials: grpc.ServerCredentials) -> int:
        return int(self._server.add_secure_port(address, server_credentials))

    # -- lifecycle
    async def start(self) -> None:
        """Start the server, then its acceptors (the core takes requests once started)."""
        await self._server.start()
        if _MISSING is not None and self._methods:
            log.warning(
                "this grpcio (%s) lacks %s: calls of one method are taken one at a time",
                grpc.__version__,
                _MISSING,
            )
        if not self._acceptors or not self._methods:
            return
        core = self._server._server  # grpc.aio's cygrpc.AioServer
        resolver = cygrpc._MethodResolver([], dict(self._methods))
        loop = asyncio.get_running_loop()
        for method in self._methods:
            for _ in range(self._acceptors):
                task = loop.create_task(self._accept(core, resolver, method))
                self._loops.add(task)
                task.add_done_callback(self._ended)

    async def _accept(self, core: Any, resolver: Any, method: str) -> None:
        """Take ``method``'s calls one after another while the server runs, each
        served by grpc.aio's own per-call path (as its accept loop does)."""
        name = method.encode()
        loop = asyncio.get_running_loop()
        while core.is_running():
            try:
                rpc_state = await core._request_registered_call(name)
            except cygrpc._RequestCallError:  # the core gave up the request: stopping
                continue  # (or not: ask again, as grpc.aio does)
            coro = cygrpc._handle_rpc(method, resolver, self._interceptors, rpc_state, loop, False)
            call = loop.create_task(cygrpc._schedule_rpc_coro(coro, rpc_state, loop, method))
            self._calls.add(call)
            call.add_done_callback(self._calls.discard)

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._loops.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("a call acceptor stopped", exc_info=task.exception())

    async def stop(self, grace: float | None) -> None:
        """Stop the server (its waiting requests fail, which ends the acceptors)."""
        await self._server.stop(grace)
        loops = list(self._loops)
        if loops:
            await asyncio.wait(loops, timeout=1.0)
        for task in self._loops:  # a request the core never answered
            task.cancel()

    async def wait_for_termination(self, timeout: float | None = None) -> bool:
        return bool(await self._server.wait_for_termination(timeout))
