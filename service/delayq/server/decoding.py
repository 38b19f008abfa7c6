"""Refusing requests that are not valid protobuf (the decode guard).

grpc.aio decodes a request with its method handler's ``request_deserializer``
before any servicer code runs; a ``DecodeError`` there ends the call UNKNOWN
("Unexpected DecodeError") and logs a traceback per request, so anyone who can
reach the port could flood the log. The port's handler wrapper
(``handlers.guarded``) decodes with ``tolerant``, which returns an
``Undecodable`` instead of raising, and ends such a call with ``refuse``:
INVALID_ARGUMENT with a short text naming the method, or the field when a string
is not UTF-8 (``wire``):

    Schedule: request is not a valid delayq.v1 message
    messages[0].topic: not valid UTF-8; the Schedule request is not a valid delayq.v1 message

Refusals are logged by ``RefusalLog``: the first at once, the rest as one line
per ``REPORT_EVERY_S`` with their count per method; never a traceback.

Invariant: a request that decodes reaches the servicer as without the guard (a
``try`` more in the deserializer, a type test in the wrapper).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from ..v1 import delayq_pb2
from .wire import bad_utf8_field

__all__ = ["REPORT_EVERY_S", "RefusalLog", "Undecodable", "refusal", "refuse", "tolerant"]

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
