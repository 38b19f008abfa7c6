"""Whether the node serves, for plain HTTP probes: ``GET /readyz`` on the metrics
port answers 200 ``serving`` or 503 with the reason (``recovering``,
``shutting down``), the same states the gRPC health service reports.

Why a second door: a kubelet's gRPC probe cannot speak TLS, so a pod whose
ports serve TLS is probed over HTTP here (the operator's pods always are). Set
from the event loop, read from the metrics server's threads; one attribute
swap, so no lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["PATH", "RECOVERING", "SERVING", "STOPPING", "Readiness", "with_readiness"]

PATH = "/readyz"
SERVING = "serving"
RECOVERING = "recovering"
STOPPING = "shutting down"


class Readiness:
    def __init__(self, state: str = RECOVERING) -> None:
        self.state = state

    def set(self, state: str) -> None:
        """``serving``, or why not."""
        self.state = state

    @property
    def ready(self) -> bool:
        return self.state == SERVING


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def with_readiness(app: WsgiApp, readiness: Readiness) -> WsgiApp:
    """``app`` (the metrics) with ``/readyz`` in front of it."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != PATH:
            return app(environ, start_response)
        state = readiness.state
        status = "200 OK" if state == SERVING else "503 Service Unavailable"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
        return [f"{state}\n".encode()]

    return wrapped
