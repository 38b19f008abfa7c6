"""Other protocols a node serves beside its own API (``Frontend``), each on a port
of its own: ``delayq serve`` is handed them (the CLI wires ``delayq.rocketmq``),
so a protocol adapter sits above the server and translates onto the node's
calls layer (``calls.Calls``, the one delayq's own servicer uses) without the
server knowing it.

The server binds each front-end's port with the public port's TLS, puts health
and reflection beside its service, wraps every handler in the port's one
handler wrapper (``handlers``: refused UNAVAILABLE while the shard recovers, no
exception leaves a call without a status), and stops it with the node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import grpc
from grpc_health.v1 import health, health_pb2

from .calls import Calls
from .gate import RecoveryGate
from .handlers import Handlers
from .listeners import bind, probed

__all__ = ["FrontPort", "Frontend", "FrontendSpec", "NodeParts"]


@dataclass(frozen=True, slots=True)
class NodeParts:
    """What a front-end is built on: the node's calls layer (the engine, the shard
    map it serves by, passing calls on to other shards; shared with delayq's own
    servicer) and the address clients dial for this shard."""

    calls: Calls
    advertise: str


class Frontend(Protocol):
    def add_to(self, server: Handlers) -> None:
        """Register the service's handlers (as on a server: the generated
        ``add_*_to_server`` functions take ``server``)."""

    def shutdown(self) -> None:
        """The server stopped: end what runs beside the calls (threads, timers)."""

    async def close(self) -> None:
        """Close what it opened (after ``shutdown``)."""


@dataclass(frozen=True, slots=True)
class FrontendSpec:
    """A front-end to serve: its name (in logs and the ready line), its gRPC
    service's full name (gated, health, reflection), the address to listen on,
    and how it is made once the node's parts exist (``make(parts, bound)``:
    ``bound`` is the address its port got)."""

    name: str
    service: str
    listen: str
    make: Callable[[NodeParts, str], Frontend]


class FrontPort:
    """One front-end's port through the node's life: bound (``open``), its
    service registered once the node's parts exist (``add``), started, opened
    to calls once the shard serves (``serving``), stopped and closed with the
    node."""

    def __init__(
        self, spec: FrontendSpec, server: grpc.aio.Server, gate: RecoveryGate, handlers: Handlers
    ) -> None:
        """``handlers``: where the port's handlers are registered, wrapped with ``gate``
        (put on ``server`` by ``add``)."""
        self.spec = spec
        self._server = server
        self._gate = gate
        self._handlers = handlers
        self._health: health.aio.HealthServicer | None = None
        self._front: Frontend | None = None
        self.address = ""

    def open(self, credentials: grpc.ServerCredentials | None) -> None:
        """Bind the port (``address`` is what it got); RuntimeError when it cannot."""
        self.address = bind(self._server, self.spec.listen, credentials)

    async def add(self, parts: NodeParts) -> None:
        """Make the front-end and register it, health (NOT_SERVING) and reflection."""
        self._front = self.spec.make(parts, self.address)
        self._front.add_to(self._handlers)
        self._health = probed(self._handlers, self.spec.service)
        self._handlers.add_to(self._server)
        for name in ("", self.spec.service):
            await self._health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)

    async def start(self) -> None:
        await self._server.start()

    async def serving(self) -> None:
        """The shard is open: let calls through and say SERVING."""
        self._gate.open()
        if self._health is None:
            raise RuntimeError("serving() before add()")
        for name in ("", self.spec.service):
            await self._health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace_s: float | None) -> None:
        """Stop taking calls (in-flight ones get ``grace_s``), then end the front-end's
        own work."""
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        await self._server.stop(grace_s)
        if self._front is not None:
            self._front.shutdown()

    async def close(self) -> None:
        if self._front is not None:
            await self._front.close()
