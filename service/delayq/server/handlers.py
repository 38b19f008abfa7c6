"""The one wrapper around every method handler of a gRPC port, applied when the
handlers are registered (``Handlers``), so that a call passes no interceptor.

A port's handlers go through ``Handlers`` (handed to the generated
``add_*_to_server`` functions, health and reflection in place of the server),
which wraps each once (``guarded``) and puts them on the server as the generated
functions would (``add_to``): grpc.aio's call path without interceptors, ~10k
instructions a call where the two interceptors this replaced took ~35k
(``bench.grpcfloor``). The wrapper does, per call:

- the recovery gate (``gate.RecoveryGate``): while the shard recovers, a gated
  method's call ends UNAVAILABLE at once (neither timed nor counted);
- the decode guard (``decoding``): an undecodable request ends INVALID_ARGUMENT;
- the failure mapping (``internal.failure``): whatever else the handler raises
  ends the call with a status;
- the call's duration and status (``rpcmetrics.RpcDurations``), after the above.

Invariants: a call whose request decodes on an open gate runs as without the
wrapper (a bool test, a type test, a ``try`` and one observation more); a
streaming request is checked message by message as the servicer iterates it;
handlers whose behaviour is not a coroutine or async-generator function are
registered untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from .decoding import RefusalLog, Undecodable, refuse, tolerant
from .gate import Failed, RecoveryGate, same_shape
from .rpcmetrics import RpcDurations

__all__ = ["Guard", "Handlers", "guarded"]

_ENDED = (asyncio.CancelledError, GeneratorExit)
"""How a call ends cancelled: the client left (or its deadline passed), or a
stream was closed while it waited to send."""


@dataclass(frozen=True, slots=True)
class Guard:
    """What the wrapper of a port's handlers does around a call: ``failure(method)``
    ends a call whose handler raised; ``refusals`` counts undecodable requests;
    ``durations`` (when given) is told of every call as it ends; ``gate`` (when
    given) refuses its service's calls until it opens."""

    refusals: RefusalLog
    failure: Callable[[str], Failed]
    durations: RpcDurations | None = None
    gate: RecoveryGate | None = None


def guarded(method: str, handler: grpc.RpcMethodHandler, guard: Guard) -> grpc.RpcMethodHandler:
    """``handler`` of ``method`` (its full name, ``/delayq.v1.DelayQueue/Schedule``)
    wrapped as the module says; ``handler`` itself when its behaviour is neither a
    coroutine nor an async-generator function."""
    behavior = (
        handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream
    )
    answers = inspect.iscoroutinefunction(behavior)  # by returning (or by context.write)
    if not answers and not inspect.isasyncgenfunction(behavior):
        return handler
    gate = guard.gate if guard.gate is not None and guard.gate.gates(method) else None
    failed = guard.failure(method)
    observe = guard.durations.observer(method) if guard.durations is not None else None
    refusals = guard.refusals
    clock = time.perf_counter
    streamed_in = handler.request_streaming
    decode = handler.request_deserializer
    if decode is not None:
        decode = tolerant(decode)

    async def checked(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        async for request in requests:
            if type(request) is Undecodable:
                await refuse(refusals, context, method, request)
            yield request

    if answers:

        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            if gate is not None and not gate.is_open:
                await gate.refuse(context)
            started, cancelled = clock(), False
            try:
                if streamed_in:
                    request = checked(request, context)
                elif type(request) is Undecodable:
                    await refuse(refusals, context, method, request)
                return await behavior(request, context)
            except Exception as exc:
                await failed(exc, context)
                raise
            except _ENDED:
                cancelled = True
                raise
            finally:
                if observe is not None:
                    observe(context, clock() - started, cancelled)

        return same_shape(handler, call, decode)

    # answers by yielding: so must the wrapper (grpc.aio looks at the function)
    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        if gate is not None and not gate.is_open:
            await gate.refuse(context)
        started, cancelled = clock(), False
        try:
            if streamed_in:
                request = checked(request, context)
            elif type(request) is Undecodable:
                await refuse(refusals, context, method, request)
            inner = behavior(request, context)
            async with contextlib.aclosing(inner):
                async for response in inner:
                    yield response
        except Exception as exc:
            await failed(exc, context)
            raise
        except _ENDED:
            cancelled = True
            raise
        finally:
            if observe is not None:
                observe(context, clock() - started, cancelled)

    return same_shape(handler, stream, decode)


class _Wrapped(grpc.GenericRpcHandler):  # type: ignore[misc]
    """A generic handler that is not a dictionary of methods (none of delayq's):
    each handler it gives is wrapped once, and kept while it gives the same one."""

    def __init__(self, inner: grpc.GenericRpcHandler, guard: Guard) -> None:
        self._inner, self._guard = inner, guard
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler | None:
        handler = self._inner.service(details)
        if handler is None:
            return None
        method = details.method
        known = self._wrapped.get(method)
        if known is None or known[0] is not handler:
            known = self._wrapped[method] = (handler, guarded(method, handler, self._guard))
        return known[1]


class Handlers:
    """A port's handlers as they are registered, wrapped once (``guarded``): hand
    it to the generated ``add_*_to_server`` functions instead of the server, then
    put them on the server with ``add_to`` before it starts.

    The generated functions register each service twice, as a generic handler
    and as registered methods; here a service's registered methods replace its
    generic handler, and go on the server both ways again, wrapped. Registered
    methods cost grpc.aio 1.85 ~85k instructions a call more than a generic
    handler (``bench.grpcfloor``: its accept loop waits over one future per
    registered method, grpc/grpc #41796), but only they let a server take a
    method's concurrent calls together (``acceptors``)."""

    def __init__(self, guard: Guard) -> None:
        self._guard = guard
        # service name (or a unique key) -> its generic handler, wrapped
        self._services: dict[object, grpc.GenericRpcHandler] = {}
        # service name -> its registered methods' handlers, wrapped
        self._registered: dict[str, dict[str, grpc.RpcMethodHandler]] = {}

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        for handler in handlers:
            key: object = handler
            if isinstance(handler, grpc.ServiceRpcHandler):
                key = handler.service_name()
                if key in self._registered:
                    continue  # its registered methods came first
            self._services[key] = _Wrapped(handler, self._guard)

    def add_registered_method_handlers(
        self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        wrapped = {
            name: guarded(f"/{service}/{name}", handler, self._guard)
            for name, handler in handlers.items()
        }
        self._registered[service] = wrapped
        self._services[service] = grpc.method_handlers_generic_handler(service, wrapped)

    def add_to(self, server: grpc.aio.Server) -> None:
        """Register every handler on ``server`` (before it starts)."""
        server.add_generic_rpc_handlers(tuple(self._services.values()))
        for service, wrapped in self._registered.items():
            server.add_registered_method_handlers(service, wrapped)
        self._services.clear()
        self._registered.clear()
