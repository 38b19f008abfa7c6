"""Refusing requests that are not valid protobuf (a server interceptor).

grpc.aio decodes a request with its method handler's ``request_deserializer``
before any servicer code runs; a ``DecodeError`` there ends the call UNKNOWN
("Unexpected DecodeError") and logs a traceback per request, so anyone who can
reach the port could flood the log. ``DecodeGuard`` wraps every handler once:
its deserializer returns an ``Undecodable`` instead of raising, and its
behaviour ends such a call INVALID_ARGUMENT with a short text naming the
method, or the field when a string is not UTF-8 (``wire``):

    Schedule: request is not a valid delayq.v1 message
    messages[0].topic: not valid UTF-8; the Schedule request is not a valid delayq.v1 message

Refusals are logged by ``RefusalLog``: the first at once, the rest as one line
per ``REPORT_EVERY_S`` with their count per method; never a traceback.

Invariants: a call whose request decodes runs exactly as without the guard
(one type test more); a streaming request is checked message by message as the
servicer iterates it (a servicer that reads with ``context.read()`` instead gets
the ``Undecodable`` itself; delayq's do not). Handlers whose behaviour is not a
coroutine or async-generator function are passed through untouched.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from ..v1 import delayq_pb2
from .gate import Failed, HandlerWrapper, around
from .rpcmetrics import RpcDurations
from .wire import bad_utf8_field

__all__ = ["REPORT_EVERY_S", "DecodeGuard", "RefusalLog", "Undecodable", "refusal"]

log = logging.getLogger("delayq.server")

_POOL = delayq_pb2.DESCRIPTOR.pool  # protobuf's default pool: every generated module's

REPORT_EVERY_S = 60.0
"""At most one log line about undecodable requests per this many seconds."""


@dataclass(frozen=True, slots=True)
class Undecodable:
    """What the guarded deserializer returns for bytes it could not decode."""

    data: bytes


def refusal(method: str, data: bytes) -> str:
    """The INVALID_ARGUMENT text for ``data`` sent to ``method`` (its full name,
    ``/delayq.v1.DelayQueue/Schedule``): the method and the package, and the field
    when a string field is not UTF-8. Quotes nothing the client sent."""
    service, _, name = method.lstrip("/").rpartition("/")
    package = service.rpartition(".")[0] or service
    field = None
    try:
        request = _POOL.FindServiceByName(service).FindMethodByName(name)
    except KeyError:  # a service not in the default pool: no field to name
        pass
    else:
        field = bad_utf8_field(request.input_type, data)
    if field is None:
        return f"{name}: request is not a valid {package} message"
    return f"{field}: not valid UTF-8; the {name} request is not a valid {package} message"


def tolerant(deserialize: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """``deserialize`` that returns an ``Undecodable`` instead of raising."""

    def decode(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception:  # any failure to decode is the client's (DecodeError mostly)
            return Undecodable(data)

    return decode


async def refuse(
    refusals: RefusalLog, context: grpc.aio.ServicerContext, method: str, bad: Undecodable
) -> None:
    """End the call of ``method`` whose request is ``bad`` INVALID_ARGUMENT, counted."""
    why = refusal(method, bad.data)
    refusals.note(method.rpartition("/")[2], why)
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)


class RefusalLog:
    """Counts refused requests and logs them at most once per ``every_s``: the
    first of a quiet spell at once, the ones after it as one line with their count
    per method when the interval ends. Not thread-safe: used on the event loop.
    ``call_later`` schedules the end of an interval (the running loop's by default)."""

    def __init__(
        self,
        every_s: float = REPORT_EVERY_S,
        call_later: Callable[[float, Callable[[], None]], object] | None = None,
    ) -> None:
        self._every_s = every_s
        self._call_later = call_later
        self._counts: collections.Counter[str] = collections.Counter()
        self._last = ""
        self._armed = False  # an interval is running: refusals are only counted
        self.total = 0
        """Refusals since start."""

    def note(self, method: str, why: str) -> None:
        self.total += 1
        self._counts[method] += 1
        self._last = why
        if not self._armed:
            self._report()

    def flush(self) -> None:
        """Log what was counted and not logged yet (at shutdown)."""
        if self._counts:
            counts, self._counts = self._counts, collections.Counter()
            log.warning(
                "refused undecodable requests",
                extra={
                    "refused": sum(counts.values()),
                    "by_method": dict(counts),
                    "last": self._last,
                },
            )

    def _report(self) -> None:
        if not self._counts:
            self._armed = False  # a quiet interval: the next refusal is logged at once
            return
        self.flush()
        self._armed = True
        schedule = self._call_later or asyncio.get_running_loop().call_later
        schedule(self._every_s, self._report)


class DecodeGuard(HandlerWrapper):
    """Wraps every method handler once: an undecodable request is INVALID_ARGUMENT,
    whatever the handler raises goes to ``failure(method)`` (the server's:
    ``internal.failure``, INTERNAL for anything unexpected), and every call's time
    and status go to ``durations`` (when given)."""

    def __init__(
        self,
        refusals: RefusalLog | None = None,
        failure: Callable[[str], Failed] | None = None,
        durations: RpcDurations | None = None,
    ) -> None:
        super().__init__()
        self.refusals = refusals or RefusalLog()
        self._failure = failure
        self._durations = durations

    async def _refuse(
        self, context: grpc.aio.ServicerContext, method: str, bad: Undecodable
    ) -> None:
        why = refusal(method, bad.data)
        self.refusals.note(method.rpartition("/")[2], why)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, why)

    def wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        deserialize = handler.request_deserializer
        failed = self._failure(method) if self._failure is not None else None
        d = self._durations
        timed = functools.partial(d.observe, method) if d is not None else None
        if deserialize is None:
            if failed is None and timed is None:
                return handler
            return around(handler, failed=failed, timed=timed)

        def decode(data: bytes) -> Any:
            try:
                return deserialize(data)
            except Exception:  # any failure to decode is the client's (DecodeError mostly)
                return Undecodable(data)

        async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
            """The request as the behaviour takes it; ends the call if it is undecodable."""
            if handler.request_streaming:
                return self._checked_stream(request, context, method)
            if type(request) is Undecodable:
                await self._refuse(context, method, request)
            return request

        return around(
            handler, prepare=checked, failed=failed, request_deserializer=decode, timed=timed
        )

    async def _checked_stream(
        self, requests: AsyncIterator[Any], context: grpc.aio.ServicerContext, method: str
    ) -> AsyncIterator[Any]:
        async for request in requests:
            if type(request) is Undecodable:
                await self._refuse(context, method, request)
            yield request
