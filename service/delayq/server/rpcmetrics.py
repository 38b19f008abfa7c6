"""Request rate and latency per RPC, by status code: the one histogram the gRPC
ports observe on their call path (``delayq_rpc_duration_seconds``, labels
``service``, ``method``, ``code``).

The handler wrapper of each port (``handlers.guarded``) times a call from its
handler's start to its end and hands the time here with the call's context. The
code is the one the call ended with: OK when the handler returned, the status it
aborted with, CANCELLED when the client went away or its deadline passed first. A
call of a stream is observed when the stream ends. Observing is a dict lookup and
one histogram add (a few µs against the hundreds gRPC itself spends per call);
everything else is read at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
from prometheus_client import Histogram
from prometheus_client.registry import Collector

__all__ = ["BUCKETS_S", "RpcDurations"]

BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
"""Seconds; a long poll (Receive waits up to its ``wait``) lands in the upper ones."""


class RpcDurations(Collector):
    """The histogram, registered with a port's metrics registry as a collector."""

    def __init__(self) -> None:
        self._histogram = Histogram(
            "delayq_rpc_duration_seconds",
            "Time from a call's start to its end on this node, by service, method and "
            "status code (its _count is the request rate).",
            ["service", "method", "code"],
            buckets=BUCKETS_S,
            registry=None,
        )

    def observer(self, method: str) -> Callable[[grpc.aio.ServicerContext, float, bool], None]:
        """What a call of ``method`` (its full name, ``/delayq.v1.DelayQueue/Schedule``)
        tells as it ends: its context, its seconds, and whether a cancellation ended
        it. The method's children are kept by status code, made on first use."""
        service, _, short = method.lstrip("/").rpartition("/")
        histogram = self._histogram
        children: dict[object, Any] = {}  # the code, or without one: cancelled or not

        def observe(context: grpc.aio.ServicerContext, seconds: float, cancelled: bool) -> None:
            code = context.code()
            key = cancelled if code is None else code
            child = children.get(key)
            if child is None:
                name = code.name if code is not None else ("CANCELLED" if cancelled else "OK")
                child = children[key] = histogram.labels(service, short, name)
            child.observe(seconds)

        return observe

    def collect(self) -> Iterator[Any]:
        yield from self._histogram.collect()
