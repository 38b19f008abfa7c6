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

from collections.abc import Iterator
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
        self._children: dict[tuple[str, str], Any] = {}

    def observe(
        self, method: str, context: grpc.aio.ServicerContext, seconds: float, cancelled: bool
    ) -> None:
        """One call of ``method`` (its full name, ``/delayq.v1.DelayQueue/Schedule``)
        ended after ``seconds``; ``cancelled``: it ended by a cancellation."""
        code = context.code()
        name = code.name if code is not None else ("CANCELLED" if cancelled else "OK")
        child = self._children.get((method, name))
        if child is None:
            service, _, short = method.lstrip("/").rpartition("/")
            child = self._children[method, name] = self._histogram.labels(service, short, name)
        child.observe(seconds)

    def collect(self) -> Iterator[Any]:
        yield from self._histogram.collect()
