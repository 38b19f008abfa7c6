"""Refusing one gRPC service's calls until the shard is open (the recovery gate).

``delayq serve`` binds its port before the engine recovers, so that health checks
get an answer (NOT_SERVING) during a long recovery instead of a refused
connection. Meanwhile every call to the gated service ends at once with
UNAVAILABLE, a message saying why and a ``retry-after-ms`` trailer: the clients'
retry policy waits and tries again. Health and reflection are never gated, nor
the ``exempt`` methods (GetRoute: the shard map is known before recovery, and a
client needs it to route anything). The port's handler wrapper
(``handlers.guarded``) asks the gate.

Invariant: the gate opens once and never closes again; an open gate costs a call
one attribute test.

Also what a handler wrapper needs to build a handler (``same_shape``, ``Failed``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from .statuscodes import RETRY_AFTER_KEY

__all__ = ["Failed", "RecoveryGate", "same_shape"]

RETRY_AFTER_MS = 1000
"""What a refused call's trailer asks the client to wait before it tries again."""

Failed = Callable[[Exception, grpc.aio.ServicerContext], Awaitable[None]]
"""Ends a call whose behaviour raised: aborts it, or returns (then the exception
propagates)."""
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


class RecoveryGate:
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
