"""Refusing one gRPC service's calls until the shard is open (a server interceptor).

``delayq serve`` binds its port before the engine recovers, so that health checks
get an answer (NOT_SERVING) during a long recovery instead of a refused
connection. Meanwhile every call to the gated service ends at once with
UNAVAILABLE, a message saying why and a ``retry-after-ms`` trailer: the clients'
retry policy waits and tries again. Health and reflection are never gated, nor
the ``exempt`` methods (GetRoute: the shard map is known before recovery, and a
client needs it to route anything).

Invariant: the gate opens once and never closes again; an open gate costs a call
one attribute check.

Also the pieces the interceptors that wrap handlers share (``same_shape``,
``around``, ``HandlerWrapper``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc

from .statuscodes import RETRY_AFTER_KEY

__all__ = [
    "Continuation",
    "Failed",
    "HandlerWrapper",
    "Prepare",
    "RecoveryGate",
    "Timed",
    "around",
    "same_shape",
]

RETRY_AFTER_MS = 1000
"""What a refused call's trailer asks the client to wait before it tries again."""

Continuation = Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler | None]]
Prepare = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]
"""The request as the behaviour gets it, from the request as received (``around``)."""
Failed = Callable[[Exception, grpc.aio.ServicerContext], Awaitable[None]]
"""Ends a call whose behaviour raised (``around``): aborts it, or raises."""
Timed = Callable[[grpc.aio.ServicerContext, float, bool], None]
"""Told of a call as it ends (``around``): its context, its seconds, and whether
a cancellation ended it."""

# handler constructors by (request_streaming, response_streaming)
_HANDLERS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def same_shape(
    handler: grpc.RpcMethodHandler,
    behavior: Callable[..., Any],
    request_deserializer: Callable[[bytes], Any] | None = None,
) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s shape (streaming or not, each way) and serializers
    that runs ``behavior``; ``request_deserializer`` replaces ``handler``'s when given."""
    make = _HANDLERS[handler.request_streaming, handler.response_streaming]
    return make(
        behavior,
        request_deserializer=request_deserializer or handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class _Timing:
    """Tells ``timed`` of a call as it ends: a cancellation, or a stream closed while
    it waited to send (``GeneratorExit``), ends it cancelled."""

    __slots__ = ("context", "started", "timed")

    def __init__(self, context: grpc.aio.ServicerContext, timed: Timed) -> None:
        self.context, self.timed, self.started = context, timed, time.perf_counter()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        cancelled = kind is not None and issubclass(kind, asyncio.CancelledError | GeneratorExit)
        self.timed(self.context, time.perf_counter() - self.started, cancelled)


_UNTIMED = contextlib.nullcontext()


def _timing(
    context: grpc.aio.ServicerContext, timed: Timed | None
) -> _Timing | contextlib.nullcontext[None]:
    return _UNTIMED if timed is None else _Timing(context, timed)


def around(
    handler: grpc.RpcMethodHandler,
    *,
    prepare: Prepare | None = None,
    failed: Failed | None = None,
    request_deserializer: Callable[[bytes], Any] | None = None,
    timed: Timed | None = None,
) -> grpc.RpcMethodHandler:
    """A handler of ``handler``'s shape whose behaviour gets the request as
    ``prepare`` returns it (when given), and whose exceptions (``prepare``'s too,
    and a streamed answer's at any message; ``Exception`` only, never a
    cancellation) go to ``failed`` (when given; they propagate if it returns);
    ``request_deserializer`` as for ``same_shape``; ``timed`` (when given) is told
    of every call as it ends, after ``failed``. A handler whose
    behaviour is neither a coroutine nor an async-generator function is returned
    as it is."""
    behavior = (
        handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream
    )
    if inspect.iscoroutinefunction(behavior):  # answers by returning (or by context.write)

        async def call(request: Any, context: grpc.aio.ServicerContext) -> Any:
            with _timing(context, timed):
                try:
                    if prepare is not None:
                        request = await prepare(request, context)
                    return await behavior(request, context)
                except Exception as exc:
                    if failed is not None:
                        await failed(exc, context)
                    raise

        return same_shape(handler, call, request_deserializer)
    if not inspect.isasyncgenfunction(behavior):
        return handler

    # answers by yielding: so must the twin (grpc.aio looks at the function)
    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        with _timing(context, timed):
            try:
                if prepare is not None:
                    request = await prepare(request, context)
                inner = behavior(request, context)
                async with contextlib.aclosing(inner):
                    async for response in inner:
                        yield response
            except Exception as exc:
                if failed is not None:
                    await failed(exc, context)
                raise

    return same_shape(handler, stream, request_deserializer)


class HandlerWrapper(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """An interceptor that wraps each method's handler (``wrap``), once: the
    wrapped twin is kept while the handler below it stays the same object."""

    def __init__(self) -> None:
        # method -> (handler as received, its wrapped twin)
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        raise NotImplementedError

    async def intercept_service(
        self, continuation: Continuation, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        if handler is None:
            return None
        method = details.method
        known = self._wrapped.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = self.wrap(method, handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped


class RecoveryGate(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Gates the methods of ``service`` (its full name, e.g. ``delayq.v1.DelayQueue``)."""

    def __init__(self, service: str, why: str, exempt: tuple[str, ...] = ()) -> None:
        self._prefix = f"/{service}/"
        self._exempt = {self._prefix + name for name in exempt}
        self._why = why
        self.is_open = False

    def open(self) -> None:
        """Let calls through from now on."""
        self.is_open = True

    def gates(self, method: str) -> bool:
        """Whether ``method`` (its full name) is refused while the gate is shut."""
        return method.startswith(self._prefix) and method not in self._exempt

    async def refuse(self, context: grpc.aio.ServicerContext) -> None:
        """End a call UNAVAILABLE, asking the client to retry after a while."""
        context.set_trailing_metadata(((RETRY_AFTER_KEY, str(RETRY_AFTER_MS)),))
        await context.abort(grpc.StatusCode.UNAVAILABLE, self._why)

    async def intercept_service(
        self, continuation: Continuation, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        method = details.method
        if self.is_open or handler is None or not method.startswith(self._prefix):
            return handler
        if method in self._exempt:
            return handler
        return self._refusal(handler)

    def _refusal(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """A handler of the same shape as ``handler`` that ends the call UNAVAILABLE."""

        async def refuse(_request: Any, context: grpc.aio.ServicerContext) -> None:
            context.set_trailing_metadata(((RETRY_AFTER_KEY, str(RETRY_AFTER_MS)),))
            await context.abort(grpc.StatusCode.UNAVAILABLE, self._why)

        return same_shape(handler, refuse)
