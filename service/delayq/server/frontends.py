"""Other protocols a node serves beside its own API (``Frontend``), each on a port
of its own: ``delayq serve`` is handed them (the CLI wires ``delayq.rocketmq``),
so a protocol adapter sits above the server and reuses its parts without the
server knowing it.

The server binds each front-end's port with the public port's TLS, puts health
and reflection beside its service, refuses its calls UNAVAILABLE while the shard
recovers, wraps every handler in the one ``DecodeGuard`` (no exception leaves a
call without a status), and stops it with the node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import grpc

from ..engine import Engine
from ..tls import TlsConfig
from .topology import Topology

__all__ = ["Frontend", "FrontendSpec", "NodeParts"]


@dataclass(frozen=True, slots=True)
class NodeParts:
    """What a front-end is built on: the node's engine, the shard map it serves
    by, the address clients dial for this shard, and how other nodes are called."""

    engine: Engine
    topology: Topology
    advertise: str
    peer_tls: TlsConfig | None


class Frontend(Protocol):
    def add_to(self, server: grpc.aio.Server) -> None:
        """Register the service's handlers."""

    def shutdown(self) -> None:
        """The server stopped: end what runs beside the calls (threads, timers)."""

    async def close(self) -> None:
        """Close the channels it opened (after ``shutdown``)."""


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
